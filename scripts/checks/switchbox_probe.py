#!/usr/bin/python3
"""ftrun's default switchbox probe (--switchbox-check): GPU-to-GPU copy bandwidth per pair.

  switchbox_probe.py --pairs 0:1 2:4 [--bytes N] [--iters K]

For each pair A:B it copies a --bytes buffer (default 256 MiB) from cuda:A to cuda:B and
back with torch.cuda (peer copies where the driver allows them, through the host otherwise),
K times each way after one warm-up copy, and prints one JSON line per pair on stdout:

  {"pair":"0:1","bandwidth_mbps":20480.3,"a_to_b_mbps":20480.3,"b_to_a_mbps":20611.0,
   "peer_access":true}                                   (one line in reality)
  {"pair":"2:4","error":"cuda:4 does not exist (2 devices)"}

bandwidth_mbps is the slower direction, in MB/s (MB = 1e6 bytes). This is the format
launcher/netcheck/switchbox.h documents; ftrun reads only "pair", "bandwidth_mbps" and "error".
Exit 0 when every pair was measured, 1 when some pair failed, 2 when there is no CUDA at all
(then every pair gets an error line, and stderr one line) or on a usage error.
Needs Debian's /usr/bin/python3 (python3-torch); the python3 first on PATH may not see torch.
"""
import argparse
import json
import re
import sys
import time


def line(obj):
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def pair_arg(text):
    m = re.fullmatch(r"(\d+):(\d+)", text)
    if not m or m.group(1) == m.group(2):
        raise argparse.ArgumentTypeError(f'bad pair "{text}" (expected A:B, two different GPUs)')
    return int(m.group(1)), int(m.group(2))


def measure(torch, a, b, nbytes, iters):
    src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{a}")
    dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{b}")

    def one_way(frm, to):
        to.copy_(frm)  # warm-up (and peer mapping)
        torch.cuda.synchronize(frm.device)
        torch.cuda.synchronize(to.device)
        start = time.perf_counter()
        for _ in range(iters):
            to.copy_(frm, non_blocking=True)
        torch.cuda.synchronize(frm.device)
        torch.cuda.synchronize(to.device)
        return nbytes * iters / (time.perf_counter() - start) / 1e6

    ab = one_way(src, dst)
    ba = one_way(dst, src)
    return {"bandwidth_mbps": round(min(ab, ba), 1), "a_to_b_mbps": round(ab, 1),
            "b_to_a_mbps": round(ba, 1),
            "peer_access": bool(torch.cuda.can_device_access_peer(a, b))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", nargs="+", type=pair_arg, required=True, metavar="A:B")
    p.add_argument("--bytes", type=int, default=256 << 20, help="buffer size (default 256 MiB)")
    p.add_argument("--iters", type=int, default=5, help="timed copies each way (default 5)")
    args = p.parse_args(argv)
    names = [f"{a}:{b}" for a, b in args.pairs]

    why = None
    try:
        import torch
        if not torch.cuda.is_available():
            why = "no CUDA device (torch.cuda.is_available() is False)"
    except Exception as e:  # ImportError, or a broken install
        why = f"cannot import torch with {sys.executable}: {e}"
    if why:
        for name in names:
            line({"pair": name, "error": why})
        sys.stderr.write(f"switchbox_probe: {why}\n")
        return 2

    count = torch.cuda.device_count()
    failed = 0
    for (a, b), name in zip(args.pairs, names):
        try:
            missing = [d for d in (a, b) if d >= count]
            if missing:
                raise RuntimeError(f"cuda:{missing[0]} does not exist ({count} devices)")
            line(dict({"pair": name}, **measure(torch, a, b, args.bytes, args.iters)))
        except Exception as e:  # one pair's failure is that pair's result
            failed += 1
            line({"pair": name, "error": " ".join(f"{type(e).__name__}: {e}".split())})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
