#!/bin/sh
# A stand-in for the switchbox probe (--switchbox-probe; the contract is in
# launcher/netcheck/switchbox.h), for the integration tests:
#   fake_switchbox_probe.sh PAIR=BEHAVIOUR ... --pairs A:B
# ftrun appends "--pairs A:B"; the probe acts out the BEHAVIOUR given for that pair:
#   a number  {"pair":"A:B","bandwidth_mbps":<number>}
#   error     {"pair":"A:B","error":"cannot enable peer access"}
#   garbage   a line that is not JSON, and no result
#   crash     no output, exit status 3
#   hang      appends "<its pid> <its child's pid>" to $FAKE_PROBE_PIDS, then waits forever
pair=
prev=
for arg in "$@"; do
  [ "$prev" = "--pairs" ] && pair=$arg
  prev=$arg
done
if [ -z "$pair" ]; then
  echo "fake_switchbox_probe: no --pairs A:B" >&2
  exit 2
fi
behaviour=
for arg in "$@"; do
  case $arg in
    "$pair="*) behaviour=${arg#"$pair="} ;;
  esac
done
case $behaviour in
  error) printf '{"pair":"%s","error":"cannot enable peer access"}\n' "$pair" ;;
  garbage) echo "p2pBandwidthLatencyTest v0.1: bandwidth matrix follows" ;;
  crash) exit 3 ;;
  hang)
    sleep 600 &
    echo "$$ $!" >>"${FAKE_PROBE_PIDS:?FAKE_PROBE_PIDS is not set}"
    wait
    ;;
  '' | *[!0-9.]*)
    echo "fake_switchbox_probe: no behaviour given for $pair" >&2
    exit 2
    ;;
  *) printf '{"pair":"%s","bandwidth_mbps":%s}\n' "$pair" "$behaviour" ;;
esac
