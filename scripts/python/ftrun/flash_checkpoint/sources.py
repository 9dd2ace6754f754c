"""Where each rank's shard can be restored from: its own node's agent, or another node's
agent holding a replica of it (ftrun-flash-checkpoint(7), REPLICAS). Used by
engine.restore_from_memory."""


def held(mem, group: str):
    """The steps of `group` this rank's agent holds (its own snapshots and replicas)."""
    if mem is None:
        return []
    try:
        return mem.steps(group)
    except OSError:
        return []


def shard_sources(comm, mem, everyone):
    """For shards: which ranks can load each rank's shard at which step, and the steps every
    shard is available at. Ranks missing the newest step anyone has ask the others' agents for
    replicas of their shard (one request per such rank, on every rank). Collective."""
    newest = max((max(h) for h in everyone if h), default=None)
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
