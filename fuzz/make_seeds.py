#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the fuzz targets into fuzz/corpus/<target>/.

Run once after changing a seed (or a target's input format): `python3 fuzz/make_seeds.py`.
The text seeds are written as they are; the protobuf ones are encoded with
`protoc --encode` from the text format below; the rendezvous-state scripts are encoded for
libFuzzer's FuzzedDataProvider (integers are taken from the end of the input, byte strings
from the front).
"""
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
PROTO = "ftrun/v1/rendezvous.proto"


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def argv(*words):
    return "\n".join(words) + "\n"


def encode(message, text):
    return subprocess.run(
        ["protoc", "--proto_path=" + os.path.join(ROOT, "proto"), "--encode=ftrun.v1." + message,
         PROTO], input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


# --- command lines: one argument per line, "@env K=V" for the environment -----------------

TORCHRUN = {
    "man_example": argv("--nproc_per_node", "4", "--max_restarts", "3", "--monitor_interval",
                        "10", "train.py", "--lr", "0.1"),
    "standalone_gpu": argv("--standalone", "--nproc-per-node", "gpu", "train.py",
                           "@env CUDA_VISIBLE_DEVICES=0,1,GPU-aa"),
    "tee_logs": argv("--nproc-per-node", "2", "-t", "3", "--log-dir", "./logs", "train.py"),
    "filter": argv("--nproc-per-node", "8", "--local-ranks-filter", "0", "--log-level",
                   "warning", "train.py", "--local-rank=${local_rank}"),
    "static_two_nodes": argv("--nnodes=2", "--node_rank=1", "--nproc_per_node=8",
                             "--master_addr=10.0.0.1", "--master_port=29500",
                             "--rdzv-conf", "timeout=300,read_timeout=60", "train.py"),
    "c10d_elastic": argv("--nnodes", "2:4", "--nproc-per-node", "auto", "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", "ftrun-master:29400", "--rdzv-id", "job42",
                         "--rdzv-conf",
                         "join_timeout=900,last_call_timeout=5,keep_alive_interval=2,"
                         "keep_alive_max_attempt=5,token=s3cret,is_host=0",
                         "--max-restarts", "3", "--fault-save", "on", "--save-timeout", "120",
                         "--hang-timeout", "600", "-m", "my.pkg.train", "--epochs", "10",
                         "@env TTP_OT=60", "@env LOGLEVEL=DEBUG"),
    "network_check": argv("--nnodes", "4", "--node-rank", "0", "--network-check",
                          "--network-check-bytes", "16MiB", "--network-check-timeout", "30",
                          "--min-network-bandwidth", "100", "--straggler-fraction", "0.5",
                          "--exclude-straggler", "--network-check-cmd", "true", "train.py"),
    "switchbox": argv("--switchbox-check", "--box-pairs", "0:1", "2:4", "3:5", "6:7",
                      "--min-bandwidth", "12000", "--min-channels", "3", "--switchbox-timeout",
                      "20", "--", "train.py"),
    "signals_and_more": argv("--signals-to-handle", "SIGTERM,INT,10", "--shutdown-timeout", "5",
                             "--redirects", "0:3,1:1", "--tee=1", "--event-log", "/tmp/ev.jsonl",
                             "--metrics-port", "0", "--no-python", "--dry-run",
                             "--duplicate-stdout-filters", "loss,,acc", "/bin/echo", "hi",
                             "@env TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7"),
    "prefixes": argv("--nproc", "2", "--max_re", "1", "--rdzv_backend=static", "--run-path",
                     "train.py"),
    "help": argv("--help"),
    "version": argv("--version"),
}

DLROVER = {
    "precheck_auto_config": argv("--precheck", "2", "--auto-config", "--nnodes", "2",
                                 "--nproc_per_node", "8", "train.py",
                                 "@env NODE_NUM=4", "@env DLROVER_MASTER_ADDR=10.0.0.9:50001",
                                 "@env ELASTIC_JOB_NAME=dl-job"),
    "node_unit": argv("--nnodes", "2:8", "--node-unit", "2", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", "10.0.0.1:29400", "--save-at-breakpoint",
                      "--numa-affinity", "--membind-policy", "bind", "train.py"),
    "ascend": argv("--accelerator", "ascend-npu", "--training-port", "61000", "--auto-tunning",
                   "--ucp-device-type", "npu", "--nproc-per-node", "gpu", "train.py",
                   "@env DLROVER_TRAINING_ELASTIC_MODE=ucp"),
    "network_check": argv("--network-check", "--comm-perf-test", "--exclude-straggler",
                          "--nnodes=3", "--node_rank=2", "--master_addr", "10.1.1.1",
                          "train.py", "--bs", "64"),
}

MSRUN = {
    "recipe": argv("--worker_num=8", "--local_worker_num=8", "--master_port=8118",
                   "--log_dir=msrun_log", "--join=True", "--cluster_time_out=300", "train.py",
                   "--config", "a.yaml", "@env MS_ENABLE_TFT={TTP:1,UCE:1}", "@env TTP_OT=30"),
    "two_nodes": argv("--worker_num", "16", "--local_worker_num", "8", "--master_addr",
                      "10.0.0.1", "--master_port", "8118", "--node_rank", "1", "--join", "False",
                      "--bind_core", "True", "--tail_worker_log", "0,1", "pytest", "t.py"),
    "bind_core_json": argv("--worker_num=2", "--local_worker_num=2",
                           '--bind_core={"device0":["0-3"],"device1":["4-7"],'
                           '"scheduler":["8-9"]}', "train.py"),
    "simulation": argv("--sim_level", "1", "--sim_rank_id", "3", "--worker_num", "1024",
                       "--local_worker_num", "1024", "train.py",
                       "@env MS_SIMULATION_LEVEL=1", "@env RANK_SIZE=1024"),
    "ftrun_extensions": argv("--worker_num=4", "--local_worker_num=2", "--max-restarts", "2",
                             "--monitor_interval", "1", "--save-timeout", "60",
                             "--hang-timeout", "300", "--rdzv_port", "9000", "--rdzv-conf",
                             "keep_alive_interval=3", "--metrics-port", "9100",
                             "--worker_log_name", "w_{ip}_{hostname}", "--rank_table_file",
                             "/tmp/rt.json", "--dry-run", "python3", "train.py"),
    "help": argv("--help"),
}

RDZV_CONF = {
    "torchrun_defaults": "timeout=900,join_timeout=600,last_call_timeout=30,close_timeout=30",
    "keep_alive": "keep_alive_interval=5, keep_alive_max_attempt=3, heartbeat_timeout=5",
    "host": "is_host=1,store_type=tcp,local_addr=10.0.0.3,rank=0",
    "token": "token=abc=def,read_timeout=10.5",
    "unknown_key": "use_agent_store=True,foo=bar",
    "bad": "timeout=,=1,,",
}

CONTROL = {
    # scripts/python/ftrun/control.py, as sent by rank 5 (local rank 1 of a node from 4).
    "helper_session": "\n".join([
        '{"type":"hello","version":1,"rank":5,"handler":false,"group":""}',
        '{"type":"handler","enabled":true,"group":"dp0"}',
        '{"type":"group","group":"dp1"}',
        '{"type":"progress","step":10,"updating":true}',
        '{"type":"progress","step":10,"updating":false}',
        '{"type":"peer_failed","error":"NCCL error: unhandled system error"}',
        '{"type":"saved","id":1,"ok":true,"error":""}',
        '{"type":"saved","id":1,"finalize":true,"ok":false,"error":"OSError: disk full"}',
    ]) + "\n",
    "wrong_rank": '{"type":"hello","version":1,"rank":4}\n',
    "wrong_version": '{"type":"hello","version":2,"rank":5}\n',
    "no_hello": '{"type":"progress","step":1}\n',
    "bad_types": '{"type":"hello","version":1,"rank":5}\n{"type":"progress","step":1.5}\n',
    "two_connections": '{"type":"hello","version":1,"rank":5}\n\n@connection\n'
                       '{"type":"hello","version":1,"rank":5}\n{"type":"group","group":"x"}\n',
    "not_json": "hello\n",
    # ftrun.flash_checkpoint's requests (scripts/python/ftrun/flash_checkpoint/memory.py).
    "snapshot_session": "\n".join([
        '{"type":"hello","version":1,"rank":5}',
        '{"type":"snapshot_steps","id":1,"group":""}',
        '{"type":"snapshot_begin","id":2,"step":3,"bytes":4096,"group":"rank-5"}',
        '{"type":"snapshot_commit","id":3,"step":3,"persist":true,"world_size":8,'
        '"root":"/ckpt","path":"/ckpt/3","name":"rank_5.pt","tracker":"dlrover_latest.txt"}',
        '{"type":"snapshot_steps","id":4,"group":"rank-5"}',
        '{"type":"snapshot_get","id":5,"step":3,"group":"rank-5"}',
        '{"type":"snapshot_begin","id":6,"step":4,"bytes":4096,"group":""}',
        '{"type":"snapshot_commit","id":7,"step":4,"persist":true,"world_size":1,'
        '"root":"/ckpt","name":"state.bin"}',
    ]) + "\n",
    "snapshot_bad": "\n".join([
        '{"type":"hello","version":1,"rank":5}',
        '{"type":"snapshot_begin","id":1,"step":-1,"bytes":0}',
        '{"type":"snapshot_begin","id":2,"step":1,"bytes":99999999999999}',
        '{"type":"snapshot_commit","id":3,"step":9}',
        '{"type":"snapshot_commit","id":4,"step":1,"world_size":1073741824,"root":"/x"}',
        '{"type":"snapshot_get","id":5,"step":77,"group":"x"}',
        '{"type":"snapshot_begin","step":1,"bytes":1}',
    ]) + "\n",
}

FILE_TIMER = {
    # torch.distributed.elastic.timer.FileTimerClient's requests.
    "acquire_release": "\n".join([
        '{"version": 1, "pid": 4242, "scope_id": "train_step", "expiration_time": 1700000000.5,'
        ' "signal": 9}',
        '{"version": 1, "pid": 4242, "scope_id": "train_step", "expiration_time": -1, "signal": 0}',
    ]) + "\n",
    "expired": '{"version":1,"pid":77,"scope_id":"s","expiration_time":0,"signal":15}\n',
    "future": '{"version":1,"pid":78,"scope_id":"s","expiration_time":9e99,"signal":15}\n',
    "malformed": '{"version":1,"pid":"x"}\nnot json\n',
}

SWITCHBOX = {
    "default": "0:1 2:4 3:5 6:7\n" + "\n".join([
        '{"pair":"0:1","bandwidth_mbps":12345.6}',
        '{"pair":"4:2","bandwidth_mbps":9000}',
        '{"pair":"3:5","error":"cannot enable peer access"}',
        "Traceback (most recent call last):",
    ]) + "\n",
    "commas": "0:1,2:3\n{\"pair\":\"0:1\",\"bandwidth_mbps\":1e4}\r\n\n",
    "bad_pairs": "0:0 1:2 2:1 1024:3 a:b\n",
}


def probe(msg_type, payload=b"", length=None):
    n = len(payload) if length is None else length
    return b"FTNP" + bytes([2, msg_type, 0, 0]) + n.to_bytes(8, "big") + payload


# The key the fuzz target's server expects (probe_wire_fuzzer.cc): a connection shows it first.
PROBE_KEY = b"fuzz-probe-key-0123456789abcdef0"
KEY = probe(7, PROBE_KEY)

PROBE = {
    "session": KEY + probe(1, b"ping0") + probe(3, b"x" * 100) +
    probe(5, (64).to_bytes(8, "big")),
    "ping_empty": KEY + probe(1),
    "too_long_ping": KEY + probe(1, b"p" * 65),
    "bad_magic": KEY + b"XXXX" + probe(1)[4:],
    "bad_version": KEY + b"FTNP" + bytes([9, 1, 0, 0]) + bytes(8),
    "pull_too_big": KEY + probe(5, (1 << 40).to_bytes(8, "big")),
    "data_short": KEY + probe(3, b"abc", length=1000),
    "unexpected_type": KEY + probe(2, b"pong"),
    "no_key": probe(1, b"ping0"),
    "wrong_key": probe(7, b"x" * len(PROBE_KEY)) + probe(1, b"ping0"),
    "short_key": probe(7, b"short") + probe(1, b"ping0"),
    "huge_key": probe(7, b"", length=1 << 40),
    "key_cut_short": probe(7, PROBE_KEY[:5], length=len(PROBE_KEY)),
}

# --- the agent's c10d store (fuzz_store_wire): chunks "<conn> <length> <bytes>" ----------


def store_str(b):
    return len(b).to_bytes(8, "little") + b


def store_chunk(conn, b):
    out = b""
    while b:
        out += bytes([conn, min(255, len(b))]) + b[:255]
        b = b[255:]
    return out


STORE = {
    "torch_session": store_chunk(0, b"\x03" + store_str(b"init/") + (1).to_bytes(8, "little"))
    + store_chunk(1, b"\x05" + (1).to_bytes(8, "little") + store_str(b"/k"))
    + store_chunk(0, b"\x00" + store_str(b"/k") + store_str(b"v1"))
    + store_chunk(1, b"\x02" + store_str(b"/k")) + store_chunk(0, b"\x06"),
    "cas_watch_delete": store_chunk(2, b"\x07" + store_str(b"/w"))
    + store_chunk(0, b"\x01" + store_str(b"/w") + store_str(b"") + store_str(b"new"))
    + store_chunk(0, b"\x08" + store_str(b"/w"))
    + store_chunk(0, b"\x04" + (2).to_bytes(8, "little") + store_str(b"/w") + store_str(b"/x")),
    "newer_torch": store_chunk(0, b"\x00\xce\xf7\x85\x3c\x0d" + bytes(8)),
    "oversized": store_chunk(3, b"\x02" + (1 << 40).to_bytes(8, "little")),
}

# --- protobuf messages (fuzz_rdzv_wire: first byte picks the message) ----------------------

HEADER = ('header { protocol_version: 2 run_id: "job42" token: "s3cret" node_id: "host-a:123:0a" '
          'node_secret: "0123456789abcdef0123456789abcdef" }')
WIRE = {
    "join": (0, "JoinRequest", HEADER + ' node { addr: "10.0.0.1" host: "host-a" node_rank: -1'
             ' nproc_per_node: 8 free_port: 29500 min_nodes: 2 max_nodes: 4 probe_port: 29401'
             ' store_listens: true }'),
    "watch": (1, "WatchRequest", HEADER + " known_version: 7 wait_ms: 10000"),
    "report_failed": (2, "ReportRequest", HEADER + ' round: 1 kind: KIND_FAILED failures {'
                      ' local_rank: 1 rank: 9 pid: 4242 exitcode: -9 error_file: "<N/A>"'
                      ' message: "Signal 9 (SIGKILL)" timestamp: 1700000000 host: "host-a" }'),
    "report_progress": (2, "ReportRequest", HEADER + " round: 2 kind: KIND_PROGRESS save_id: 1"
                        ' progress { rank: 0 group: "dp0" step: 12 healthy: true has_handler: true }'
                        ' progress { rank: 1 group: "dp1" step: 11 updating: true healthy: true }'),
    "report_saved": (2, "ReportRequest", HEADER + " round: 2 kind: KIND_SAVED save_id: 1"
                     " saver_rank: 0 finalize: true ok: false error: \"disk full\""),
    "report_checked": (2, "ReportRequest", HEADER + " round: 0 kind: KIND_CHECKED check_id: 3"
                       ' check_results { index: 0 probed: true probe_ok: true mbps_ab: 1200.5'
                       ' mbps_ba: 1100 rtt_ms: 0.2 ran_command: true command_ok: false'
                       ' command_reason: "exit 1" command_seconds: 3.5 }'),
    "report_unreachable": (2, "ReportRequest", HEADER.replace("protocol_version: 2",
                                                               "protocol_version: 3")
                           + ' round: 4 kind: KIND_UNREACHABLE unreachable_rank: 2'
                           ' error: "10.0.0.3:29500: No route to host"'),
    "view_running_peers": (3, "NodeView", "version: 9 phase: PHASE_RUNNING round: 4 member: true"
                           " assignment { round: 4 group_rank: 1 group_world_size: 3"
                           ' base_rank: 8 world_size: 24 master_addr: "10.0.0.1"'
                           " master_port: 29500 }"
                           ' store_peers { group_rank: 0 addr: "10.0.0.1" port: 29500 }'
                           ' store_peers { group_rank: 2 addr: "10.0.0.3" port: 41234 }'),
    "view_saving": (3, "NodeView", "version: 12 phase: PHASE_SAVING round: 2 restart_count: 1"
                    " max_restarts: 3 member: true assignment { round: 2 restart_count: 1"
                    ' group_rank: 1 group_world_size: 2 base_rank: 8 world_size: 16'
                    ' master_addr: "10.0.0.1" master_port: 29500 max_restarts: 3 }'
                    ' nodes_joined: 2 reason: "worker rank 9 failed" failures { rank: 9 }'
                    ' save { id: 1 step: 12 savers { rank: 0 group: "dp0" } finalize: true'
                    ' finalizer: 0 }'),
    "view_checking": (3, "NodeView", "version: 3 phase: PHASE_CHECKING check { id: 4 round: 1"
                      ' wave: 0 bytes: 1048576 timeout_s: 30 run_command: true tasks { index: 2'
                      ' peer: "b" peer_host: "host-b" client: true peer_addr: "10.0.0.2"'
                      ' peer_port: 29401 master_addr: "10.0.0.2" master_port: 40000 } }'
                      ' excluded: "faulty" check_id: 1 check_table: "node  verdict"'
                      ' check_json: "{}"'),
    "status": (4, "JobStatus", 'run_id: "job42" view { version: 5 phase: PHASE_RUNNING }'
               ' min_nodes: 2 max_nodes: 4 world_size: 16 nodes { node_id: "a" host: "host-a"'
               ' addr: "10.0.0.1" node_rank: -1 nproc_per_node: 8 group_rank: 0 base_rank: 0'
               ' silent_seconds: 0.5 }'),
}


# --- rendezvous-state scripts (FuzzedDataProvider encoding) --------------------------------

class Script:
    """Builds an input for fuzz_rdzv_state: integers go to the back, in reverse order."""

    def __init__(self):
        self.back = []   # consumption order
        self.front = b""

    def int_in(self, lo, hi, value):
        rng = hi - lo
        v = value - lo
        assert 0 <= v <= rng
        nbytes = 0
        while nbytes < 8 and (rng >> (8 * nbytes)) > 0:
            nbytes += 1
        # FDP reads the last byte first and makes it the most significant one.
        for i in reversed(range(nbytes)):
            self.back.append((v >> (8 * i)) & 0xFF)
        return self

    def u8(self, value):
        return self.int_in(0, 255, value)

    def bool(self, value):
        return self.u8(1 if value else 0)

    def pick(self, n, index):
        return self.int_in(0, n - 1, index)

    def data(self):
        return self.front + bytes(reversed(self.back))

    # JobSpec (ReadSpec's order).
    def spec(self, min_nodes, extra_max, static, nproc, restarts, unit, fault_save, check,
             exclude=False, run_command=False):
        self.int_in(1, 4, min_nodes).int_in(0, 2, extra_max).bool(static)
        self.int_in(0, 2, nproc).int_in(0, 3, restarts).int_in(1, 2, unit).bool(fault_save)
        self.pick(3, 0).pick(3, 1).pick(3, 1).pick(2, 0).pick(3, 1)  # last call .. save
        self.bool(check).pick(2, 0).pick(3, 1).pick(2, 0).bool(exclude).bool(run_command)
        return self

    def op(self, kind, node, wait_ms=0):
        self.u8((node << 4) | kind).u8(wait_ms // 25)
        return self

    def round(self):
        return self.int_in(0, 7, 2)  # the current round


def state_scripts():
    out = {}
    # Two dynamic nodes form a round, node 1's rank fails, the save runs, both stop, re-form.
    s = Script().spec(2, 0, False, 2, 1, 1, True, False)
    s.op(1, 0).op(1, 1)                                     # joins (nproc from the spec)
    s.op(9, 0, 100).op(9, 1, 100)                           # watches
    s.op(3, 1).int_in(0, 1, 0).pick(3, 0).round()           # rank 2 failed (exitcode 1)
    for node in (0, 1):                                     # progress of both ranks each
        s.op(6, node)
        for _ in range(2):
            s.pick(3, 0).int_in(-1, 3, 3).bool(False).int_in(0, 7, 1).int_in(0, 7, 1)
        s.round()
    s.op(7, 0).int_in(0, 9, 0).pick(1, 0).int_in(0, 7, 1).int_in(0, 5, 1).round()  # the saver acks
    s.op(5, 0).round().op(5, 1).round()                     # both stopped
    s.op(4, 0).round().op(4, 1).round()                     # next round succeeds
    out["save_then_restart"] = s.data()

    # Three nodes, network check on: join, report the check's results, one leaves.
    s = Script().spec(2, 1, False, 1, 0, 1, False, True)
    for n in range(3):
        s.op(1, n)
    for n in range(3):
        s.op(8, n)
        for _ in range(2):  # up to two tasks each
            s.int_in(0, 7, 1).int_in(0, 3, 1).pick(4, 2).pick(4, 2).int_in(0, 3, 1)
        s.round()
    s.op(12, 2).op(14, 0).int_in(0, 30, 20)
    out["network_check"] = s.data()

    # Static ranks: node ranks 0 and 1 join, node 1 goes silent and is lost.
    s = Script().spec(2, 0, True, 1, 2, 1, False, False)
    s.op(1, 0).int_in(0, 4, 0).op(1, 1).int_in(0, 4, 1)
    s.op(11, 1, 500).op(9, 0, 6000).op(14, 0).int_in(0, 30, 30)
    out["static_lost"] = s.data()

    # A join and a report from protobuf bytes (what RendezvousServer decodes).
    s = Script().spec(1, 1, False, 0, 0, 1, True, False)
    node = encode("NodeInfo", 'addr: "10.0.0.1" host: "a" node_rank: -1 nproc_per_node: 2'
                  ' free_port: 29500 min_nodes: 1 max_nodes: 2')
    s.op(0, 0).int_in(0, 256, len(node))
    s.front += node
    report = encode("ReportRequest", "kind: KIND_FAILED failures { rank: 1 exitcode: 1 }")
    s.op(2, 0, 2500).u8(1).int_in(0, 1024, len(report))
    s.front += report
    out["wire_join_report"] = s.data()
    return out


# --- the lease mailbox's page 1 as a worker writes it (lease_mailbox_fuzzer.cc): a flags byte
# (1: the record gets a real buffer's inode, 2: the newest snapshot's buffer, 4: the record's
# number is set to the page's), then the page: the newest save's number, its record at
# 64 + (number % 2) * 2016: number, step, inode, bytes, path length, path.
def mailbox(flags, number, record=None, path=b""):
    page = bytearray(64 + 2 * 2016)
    struct.pack_into("<q", page, 0, number)
    if record is not None:
        at = 64 + (number % 2) * 2016
        struct.pack_into("<5q", page, at, *record)
        page[at + 40:at + 40 + len(path)] = path
    return bytes([flags]) + bytes(page)


MAILBOX = {
    "nothing_recorded": mailbox(0, 0),
    "save_into_the_leased_buffer": mailbox(1, 1, (1, 7, 0, 4096, 12), b"/ckpt/7/a.pt"),
    "save_into_the_other_buffer": mailbox(3, 2, (2, 8, 0, 100, 0)),
    "number_repaired": mailbox(5, 3, (0, 9, 0, 64, 1), b"/"),
    "negative_number": mailbox(0, -1),
    "record_of_another_save": mailbox(1, 5, (3, 9, 0, 64, 0)),
    "path_too_long": mailbox(1, 1, (1, 7, 0, 4096, 5000)),
    "path_with_a_control_character": mailbox(1, 1, (1, 7, 0, 4096, 4), b"/a\x01b"),
    "relative_path": mailbox(1, 1, (1, 7, 0, 4096, 3), b"a/b"),
    "more_bytes_than_the_buffer": mailbox(1, 1, (1, 7, 0, 1 << 40, 0)),
    "no_bytes": mailbox(1, 1, (1, 7, 0, 0, 0)),
    "unknown_inode": mailbox(0, 1, (1, 7, 123456789, 64, 0)),
}


# --- a memory snapshot as a worker writes it (torch_file_fuzzer.cc; snapshot.py's layout):
# "FTRUNSN1", the header's length, the header, then at 64-byte boundaries the pickle (tensors
# as persistent ids 0..n-1) and each tensor's bytes. Made with pickle alone (no torch).
class _Tensor:
    def __init__(self, index):
        self.index = index


class _SnapshotPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.index if isinstance(obj, _Tensor) else None


def snapshot(state, tensors, protocol=3, header_extra=None, files=None):
    """tensors: (dtype, shape, element size) each; state holds _Tensor(i) where tensor i is.
    files: instead of state, {name: state} of a snapshot of several files."""
    pickles = []
    for name, value in (files or {None: state}).items():
        buf = io.BytesIO()
        _SnapshotPickler(buf, protocol=protocol).dump(value)
        pickles.append((name, buf.getvalue()))
    align = lambda n: (n + 63) // 64 * 64  # noqa: E731
    at, placed = 1024, []
    for name, pickled in pickles:
        placed.append([name, at, len(pickled)])
        at = align(at + len(pickled))
    entries, offset = [], at
    for dtype, shape, size in tensors:
        entries.append([offset, dtype, shape])
        n = size
        for d in shape:
            n *= d
        offset = align(offset + n)
    where = {"files": placed} if files else {"pickle": placed[0][1:]}
    header = dict({"format": 1, "step": 3, "world_size": 1, "bytes": offset, **where,
                   "tensors": entries}, **(header_extra or {}))
    text = json.dumps(header, separators=(",", ":")).encode()
    data = bytearray(offset)
    data[:16 + len(text)] = b"FTRUNSN1" + struct.pack("<Q", len(text)) + text
    for (_, at, n), (_, pickled) in zip(placed, pickles):
        data[at:at + n] = pickled
    for i, (start, _, _) in enumerate(entries):
        data[start:start + 4] = bytes([i, 1, 2, 3])
    return bytes(data)


_MODEL = {"model": {"w": _Tensor(0), "b": _Tensor(1)}, "step": 3, "lr": 0.1, "name": "run",
          "opt": {"state": {0: {"exp_avg": _Tensor(2)}}, "param_groups": [{"params": [0]}]}}
_MODEL_TENSORS = [("float32", [3, 5], 4), ("float32", [3], 4), ("bfloat16", [2, 2], 2)]
TORCH_FILE = {
    "model_protocol_3": snapshot(_MODEL, _MODEL_TENSORS),
    "model_protocol_5": snapshot(_MODEL, _MODEL_TENSORS, protocol=5),
    "scalar_and_empty": snapshot([_Tensor(0), _Tensor(1)], [("int64", [], 8),
                                                           ("bool", [0, 4], 1)]),
    "no_tensors": snapshot({"step": 1}, []),
    "unknown_dtype": snapshot([_Tensor(0)], [("float8_e4m3fn", [2], 1)]),
    "index_beyond_the_tensors": snapshot([_Tensor(1)], [("uint8", [2], 1)]),
    "tensor_outside": snapshot([_Tensor(0)], [("float64", [2], 8)],
                               header_extra={"tensors": [[1 << 40, "float64", [2]]]}),
    "two_files": snapshot(None, _MODEL_TENSORS, files={
        "model_optim_rng.pt": {"model": {"w": _Tensor(0), "b": _Tensor(1)}, "iteration": 3},
        "distrib_optim.pt": {"param_state": {0: {"exp_avg": _Tensor(2)}}}}),
}


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    for target, seeds in [("fuzz_torchrun_args", TORCHRUN), ("fuzz_dlrover_args", DLROVER),
                          ("fuzz_msrun_args", MSRUN), ("fuzz_rdzv_conf", RDZV_CONF),
                          ("fuzz_control_channel", CONTROL), ("fuzz_file_timer", FILE_TIMER),
                          ("fuzz_switchbox", SWITCHBOX), ("fuzz_probe_wire", PROBE),
                          ("fuzz_store_wire", STORE),
                          ("fuzz_lease_mailbox", MAILBOX), ("fuzz_torch_file", TORCH_FILE)]:
        for name, data in seeds.items():
            write(target, name, data)
    for name, (kind, message, text) in WIRE.items():
        write("fuzz_rdzv_wire", name, bytes([kind]) + encode(message, text))
    for name, data in state_scripts().items():
        write("fuzz_rdzv_state", name, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
