"""Where each rank's copy can be restored from: its own node's agent, or another node's
agent holding a replica of it (ftrun-flash-checkpoint(7), REPLICAS and RESTORING), and which
step: the one the rendezvous decided for the round from every node's memory. Used by
engine.restore_from_memory."""
import os


def inventory(mem, group: str):
    """(steps, decided): the steps of `group` this rank's agent holds (its own snapshots and
    replicas), newest first, and the step the round restores as the rendezvous decided it
    (-1: memory has none the job can restore; None: not decided, e.g. a single node)."""
    if mem is None:
        return [], None
    try:
        answer, fd = mem.request({"type": "snapshot_steps", "group": group})
    except OSError:
        return [], None
    if fd >= 0:
        os.close(fd)
    decided = answer.get("restore_step")
    return [int(s) for s in answer.get("steps", [])], (None if decided is None else int(decided))


def held(mem, group: str):
    """The steps of `group` this rank's agent holds (its own snapshots and replicas)."""
    return inventory(mem, group)[0]


def agreed(decisions):
    """The round's decided step from every rank's answer: they come from one assignment, so
    they agree; if they do not (an agent of an older round), None (the ranks agree among
    themselves instead)."""
    return decisions[0] if len(set(decisions)) == 1 else None


def shard_sources(comm, mem, everyone, want=None):
    """For shards: which ranks can load each rank's shard at which step, and the steps every
    shard is available at. Ranks missing step `want` (default: the newest step anyone has)
    ask the others' agents for replicas of their shard (one request per such rank, on every
    rank). Collective."""
    newest = want if want is not None else max((max(h) for h in everyone if h), default=None)
    behind = [r for r, h in enumerate(everyone) if newest is not None and newest not in h]
    asked = {r: (held(mem, f"rank-{r}") if r != comm.rank else []) for r in behind}
    replicas = comm.gather(asked) if behind else [{} for _ in everyone]
    sources, candidates = {}, None
    for r in range(comm.world_size):
        by_step = {}
        for s in everyone[r]:
            by_step.setdefault(s, []).append(r)
        for holder, got in enumerate(replicas):
            for s in got.get(r, []):
                by_step.setdefault(s, []).append(holder)
        sources[r] = by_step
        candidates = set(by_step) if candidates is None else candidates & set(by_step)
    return sources, candidates or set()
