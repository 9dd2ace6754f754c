"""Atomic, verifiable checkpoints: what ftrun's fault-time saves write, and what a training
script can use for its periodic ones.

Layout under a checkpoint root (ideally on storage every node can reach):

    ftrun-step-<S>/                 a complete checkpoint of the state after step S
        MANIFEST.json               written last: step, world size, groups, files, sizes, CRC-32s
        group-<name>/...            one replica group's files (the save handler's output)
    .ftrun-step-<S>.tmp-<tag>/      a save in progress: never loaded

A save writes into the temporary directory, fsyncs every file, writes the manifest, renames
the directory into place and fsyncs the root. `latest()` returns the newest checkpoint whose
manifest verifies; partial or corrupt ones are skipped with a line on stderr.
"""
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import time
import zlib

FORMAT = 1
_FINAL = re.compile(r"^ftrun-step-(\d+)$")


class CheckpointError(Exception):
    pass


class CheckpointDamaged(CheckpointError):
    """A checkpoint directory whose contents do not match its manifest (or its name): it
    was changed on storage after it was complete."""


def part_dir_name(group: str) -> str:
    """Directory of a replica group's files: readable, and unique for any group name."""
    if not group:
        return "group-all"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", group)[:64]
    return f"group-{safe}-{hashlib.sha1(group.encode()).hexdigest()[:8]}"


def final_dir(root: str, step: int) -> str:
    return os.path.join(root, f"ftrun-step-{step}")


def temp_dir(root: str, step: int, tag: str) -> str:
    return os.path.join(root, f".ftrun-step-{step}.tmp-{tag}")


def aside_dir(root: str, step: int, kind: str) -> str:
    """A hidden name, unique to this process and call, for the directory of `step` moved out
    of the loaders' sight (kind: "deleted" by a deletion strategy, "damaged")."""
    return os.path.join(root, f".ftrun-step-{step}.{kind}-{os.getpid()}-{time.monotonic_ns()}")


def _fsync_path(path: str, directory: bool = False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            crc = zlib.crc32(block, crc)
    return crc


def checksum_problem(path: str, meta: dict):
    """What is wrong with the file at path against its manifest entry, or None: it must have
    the checksum the entry records, zlib's CRC-32 ("crc32", what ftrun writes: it finds torn
    and corrupted files at a quarter of SHA-256's cost), or "sha256" in checkpoints written
    before 2026-11-29 (both checked when both are there). An entry with neither is refused."""
    if "crc32" not in meta and "sha256" not in meta:
        return "has no checksum in the manifest"
    if (("crc32" in meta and _crc32(path) != meta["crc32"]) or
            ("sha256" in meta and _sha256(path) != meta["sha256"])):
        return "has the wrong checksum"
    return None


def written_before(path: str, when: float, follow_symlinks: bool = True) -> bool:
    """Whether the file at path was last written before `when` (seconds since the epoch);
    False when it is missing. follow_symlinks=False: a link's own time."""
    try:
        return os.stat(path, follow_symlinks=follow_symlinks).st_mtime < when
    except OSError:
        return False


def stored_before(root: str, step: int, when: float) -> bool:
    """Whether root's checkpoint of `step` was stored (its manifest written) before `when`."""
    return written_before(os.path.join(final_dir(root, step), "MANIFEST.json"), when)


def _write_json(path: str, data: dict):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_part(tmp: str, group: str, step: int, handler) -> dict:
    """Runs handler(step, directory) for one group's files, fsyncs them, records their sizes
    and checksums in PART.json. A stale part of the same group is removed first."""
    part = os.path.join(tmp, part_dir_name(group))
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    handler(step, part)
    files = {}
    for dirpath, dirnames, filenames in os.walk(part):
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, part)
            if rel == "PART.json":
                continue
            _fsync_path(path)
            files[rel] = {"size": os.path.getsize(path), "crc32": _crc32(path)}
        for d in dirnames:
            _fsync_path(os.path.join(dirpath, d), directory=True)
    info = {"group": group, "dir": part_dir_name(group), "step": step, "files": files}
    _write_json(os.path.join(part, "PART.json"), info)
    _fsync_path(part, directory=True)
    return info


def finalize(root: str, tmp: str, step: int, groups, world_size: int, reason: str,
             replace_before: float = None) -> str:
    """Writes the manifest from every group's PART.json and renames the checkpoint into
    place. Returns the final directory. A complete checkpoint of the step is kept, unless its
    manifest was written before replace_before (seconds since the epoch: an earlier run's),
    which this one replaces."""
    parts = {}
    for group in groups:
        path = os.path.join(tmp, part_dir_name(group), "PART.json")
        try:
            with open(path) as f:
                part = json.load(f)
        except (OSError, ValueError) as e:
            raise CheckpointError(f"group '{group}' has no complete part in {tmp}: {e}")
        if part.get("step") != step:
            raise CheckpointError(f"group '{group}' saved step {part.get('step')}, not {step}")
        parts[group] = {"dir": part["dir"], "files": part["files"]}
    manifest = {"format": FORMAT, "step": step, "world_size": world_size, "groups": parts,
                "reason": reason, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    _write_json(os.path.join(tmp, "MANIFEST.json"), manifest)
    _fsync_path(tmp, directory=True)
    final = final_dir(root, step)
    if replace_before is not None and stored_before(root, step, replace_before):
        aside = aside_dir(root, step, "deleted")
        with contextlib.suppress(OSError):
            os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
    if os.path.exists(final):
        # The same step is already saved (e.g. a periodic checkpoint): keep that one.
        shutil.rmtree(tmp, ignore_errors=True)
        return final
    os.rename(tmp, final)
    _fsync_path(root, directory=True)
    return final


def save(root: str, step: int, handler, group: str = "", world_size: int = 0,
         reason: str = "periodic", replace_before: float = None) -> str:
    """A complete checkpoint written by one process (e.g. rank 0 of a DDP job):
    handler(step, directory) writes the files. Returns the final directory. replace_before:
    as finalize's."""
    os.makedirs(root, exist_ok=True)
    tmp = temp_dir(root, step, f"{os.getpid()}-{time.monotonic_ns()}")
    os.makedirs(tmp)
    try:
        write_part(tmp, group, step, handler)
        return finalize(root, tmp, step, [group],
                        world_size or int(os.environ.get("WORLD_SIZE")
                                          or os.environ.get("RANK_SIZE") or "1"), reason,
                        replace_before)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class Checkpoint:
    def __init__(self, path: str, manifest: dict):
        self.path = path
        self.manifest = manifest
        self.step = manifest["step"]

    def part(self, group: str = "") -> str:
        """The directory holding `group`'s files."""
        groups = self.manifest["groups"]
        if group not in groups:
            raise CheckpointError(f"{self.path} has no replica group '{group}' "
                                  f"(it has {sorted(groups)})")
        return os.path.join(self.path, groups[group]["dir"])

    def __repr__(self):
        return f"Checkpoint(step={self.step}, path={self.path!r})"


def verify(path: str, checksums: bool = True) -> dict:
    """The manifest of a complete checkpoint, or CheckpointError saying what is wrong."""
    try:
        with open(os.path.join(path, "MANIFEST.json")) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise CheckpointDamaged("no MANIFEST.json (an interrupted save)")
    except (OSError, ValueError) as e:
        raise CheckpointDamaged(f"unreadable MANIFEST.json: {e}")
    if manifest.get("format") != FORMAT or "step" not in manifest or "groups" not in manifest:
        raise CheckpointDamaged("MANIFEST.json is not an ftrun manifest")
    named = _FINAL.match(os.path.basename(os.path.normpath(path)))
    if named and int(named.group(1)) != manifest["step"]:
        # A copy under another step's name would be loaded as that step, and would keep a
        # real save of it out (the agent keeps a step directory that exists).
        raise CheckpointDamaged(f"MANIFEST.json is of step {manifest['step']}, not of the "
                                f"step {named.group(1)} its directory names")
    for group, part in manifest["groups"].items():
        for rel, meta in part["files"].items():
            fpath = os.path.join(path, part["dir"], rel)
            if not os.path.isfile(fpath):
                raise CheckpointDamaged(f"missing file {part['dir']}/{rel}")
            if os.path.getsize(fpath) != meta["size"]:
                raise CheckpointDamaged(f"{part['dir']}/{rel} has the wrong size")
            problem = checksums and checksum_problem(fpath, meta)
            if problem:
                raise CheckpointDamaged(f"{part['dir']}/{rel} {problem}")
    return manifest


def latest(root: str, checksums: bool = True, log=sys.stderr):
    """The newest checkpoint under root whose manifest verifies, or None."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return None
    found = sorted(((int(m.group(1)), n) for n in names if (m := _FINAL.match(n))), reverse=True)
    for step, name in found:
        path = os.path.join(root, name)
        try:
            return Checkpoint(path, verify(path, checksums))
        except CheckpointError as e:
            print(f"ftrun: skipping checkpoint {path}: {e}", file=log, flush=True)
    return None
