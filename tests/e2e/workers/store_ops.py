"""Exercises the agent's c10d store from a real torch.distributed.TCPStore client: every
operation torch 1.13's client has, a PrefixStore as torch's env:// uses, a hostile frame on a
raw socket (only that connection is closed), a TCPStore server of the script's own on
MASTER_PORT (refused: the port is the agent's, as under torchrun's static backend), then the
process group itself. Writes <out>/store.<attempt>.<RANK>.json once the group is formed; with
a second argument "crash", rank 1 of attempt 0 then exits 1. Any failed check raises."""
import json
import os
import socket
import struct
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

out = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
crash = len(sys.argv) > 2 and sys.argv[2] == "crash"
result = {"rank": rank, "attempt": attempt, "master_port": port}

store = dist.TCPStore(addr, port, world, False, timedelta(seconds=30))
me = f"ops/{attempt}/{rank}"
store.set(f"{me}/k", "v1")
assert store.get(f"{me}/k") == b"v1"
assert store.add(f"{me}/n", 5) == 5 and store.add(f"{me}/n", -2) == 3
assert store.get(f"{me}/n") == b"3"
assert store.compare_set(f"{me}/k", "v1", "v2") == b"v2"
assert store.compare_set(f"{me}/k", "nope", "v3") == b"v2"
assert store.compare_set(f"{me}/new", "", "made") == b"made"
store.wait([f"{me}/k", f"{me}/new"])
assert store.num_keys() >= 4
assert store.delete_key(f"{me}/k") is True
assert store.delete_key(f"{me}/k") is False
t0 = time.monotonic()
try:
    store.wait([f"{me}/never"], timedelta(milliseconds=300))
    raise AssertionError("a wait for an unset key returned")
except RuntimeError as e:
    assert "timeout" in str(e).lower(), e
assert time.monotonic() - t0 < 5
assert store.get(f"{me}/n") == b"3"  # the connection still works after a timed-out wait
# Rendezvous between the ranks through the store: each waits for the others' keys.
hello = f"hello/{attempt}"
store.set(f"{hello}/{rank}", str(rank))
store.wait([f"{hello}/{r}" for r in range(world)], timedelta(seconds=30))
assert [store.get(f"{hello}/{r}") for r in range(world)] == [str(r).encode() for r in range(world)]
prefixed = dist.PrefixStore(f"/worker/attempt_{attempt}", store)
prefixed.set(f"p{rank}", "x")
assert prefixed.get(f"p{rank}") == b"x"

if rank == 0:
    # A hostile frame: GET with a key length of 2^62. The store closes that connection only.
    s = socket.create_connection((addr, port), timeout=10)
    s.sendall(b"\x02" + struct.pack("<Q", 1 << 62))
    assert s.recv(1) == b"", "the store answered a hostile frame"
    s.close()
    assert store.get(f"{me}/n") == b"3"
    # A store of the script's own on MASTER_PORT fails: the agent holds the port.
    try:
        dist.TCPStore(addr, port, 1, True, timedelta(seconds=5), wait_for_workers=False)
        result["own_server"] = "started"
    except RuntimeError as e:
        result["own_server"] = str(e)

t0 = time.monotonic()
dist.init_process_group("gloo")
result["init_seconds"] = time.monotonic() - t0
with open(os.path.join(out, f"store.{attempt}.{rank}.json"), "w") as f:
    json.dump(result, f)
if crash and attempt == 0 and rank == 1:
    os._exit(1)
t = torch.tensor([float(rank)])
dist.all_reduce(t)
assert t.item() == world * (world - 1) / 2, t.item()
dist.destroy_process_group()
