"""Carry the cuDNN-frontend peer's wheels to a GPU machine that cannot reach a registry.

The wheels (bench/requirements-peers.txt, about 107 MiB, most of it the CuTe-DSL compiler in
nvidia-cutlass-dsl-libs-cu13) do not fit in one device call's 64 MiB working-tree limit, so
`pack` splits them into part folders of at most --part-mib each (large files cut into
chunks) with a manifest of every wheel's size and sha256 in each part. On the GPU machine a
first call copies part 1 somewhere that outlives the call (`stage`), and the next call gives
all the parts to bench/peers.py --wheels, which reassembles and verifies the wheels and
installs them with pip --no-index --no-deps --target.

    python3 bench/peer_wheels.py pack --src .whl --out .whl/parts --part-mib 56   # here
    python3 bench/peer_wheels.py stage .whl/parts/p1 --to /tmp/dsa_peers_stage    # GPU call 1
    python3 bench/peers.py --wheels /tmp/dsa_peers_stage .whl/parts/p2 ...        # GPU call 2

Plain wheel folders (no parts, no manifest) work with --wheels as well.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

MANIFEST = "MANIFEST.json"
MIB = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def pack(src: Path, out: Path, part_mib: float) -> list[Path]:
    """Splits src/*.whl into out/p1, out/p2, ... of at most part_mib MiB each."""
    wheels = sorted(src.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"pack: no *.whl in {src}")
    limit = int(part_mib * MIB)
    manifest = {"wheels": {w.name: {"size": w.stat().st_size, "sha256": _sha256(w)} for w in wheels}}
    if out.exists():
        shutil.rmtree(out)
    parts: list[list[tuple[Path, int, int, str]]] = [[]]  # (wheel, offset, length, name)
    room = limit
    # Whole small wheels first, then the big ones chunked into what room is left.
    for w in sorted(wheels, key=lambda p: p.stat().st_size):
        size, offset, index = w.stat().st_size, 0, 0
        while offset < size:
            if room == 0:
                parts.append([])
                room = limit
            n = min(room, size - offset)
            whole = offset == 0 and n == size
            parts[-1].append((w, offset, n, w.name if whole else f"{w.name}.part-{index:02d}"))
            offset += n
            room -= n
            index += 1
    dirs = []
    for i, items in enumerate(parts, 1):
        d = out / f"p{i}"
        d.mkdir(parents=True)
        for w, offset, n, name in items:
            with open(w, "rb") as f_in, open(d / name, "wb") as f_out:
                f_in.seek(offset)
                f_out.write(f_in.read(n))
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        dirs.append(d)
    return dirs


def stage(parts: list[Path], to: Path) -> None:
    """Copies part folders' files into `to` (a place that outlives the device call)."""
    to.mkdir(parents=True, exist_ok=True)
    for d in parts:
        for f in d.iterdir():
            if f.is_file():
                shutil.copy2(f, to / f.name)


def assemble(dirs: list[Path], work: Path) -> tuple[list[Path], list[str]]:
    """Whole, verified wheels from the given folders (plain wheels or parts + manifest).
    Returns (wheels, problems); a wheel that is incomplete or fails its hash is a problem."""
    work.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    manifest: dict = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for f in d.iterdir():
            if f.name == MANIFEST:
                manifest.update(json.loads(f.read_text())["wheels"])
            elif f.is_file():
                files[f.name] = f
    problems, wheels = [], []
    names = set(manifest) | {n for n in files if n.endswith(".whl")}
    for name in sorted(names):
        chunks = sorted(n for n in files if n.startswith(name + ".part-"))
        if name in files and not chunks:
            path = files[name]
        elif chunks:
            path = work / name
            with open(path, "wb") as out:
                for c in chunks:
                    with open(files[c], "rb") as f:
                        shutil.copyfileobj(f, out, MIB)
        else:
            problems.append(f"{name}: missing (no file and no chunks among {', '.join(map(str, dirs))})")
            continue
        want = manifest.get(name)
        if want is not None:
            size = path.stat().st_size
            if size != want["size"]:
                problems.append(f"{name}: {size} bytes from {len(chunks) or 1} piece(s), expected {want['size']} (a part is missing)")
                continue
            if _sha256(path) != want["sha256"]:
                problems.append(f"{name}: sha256 mismatch")
                continue
        wheels.append(path)
    return wheels, problems


def install(dirs: list[Path], target: Path) -> tuple[bool, str]:
    """Assembles, verifies and pip-installs the wheels into `target`, then puts `target` at
    the front of sys.path with its .pth files processed. Returns (ok, message)."""
    with tempfile.TemporaryDirectory(prefix="dsa_peer_wheels_") as tmp:
        wheels, problems = assemble(dirs, Path(tmp))
        if problems:
            return False, "wheels incomplete: " + "; ".join(problems)
        if not wheels:
            return False, f"no wheels in {', '.join(map(str, dirs))}"
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, wheels)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return False, f"pip install failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}"
    before = list(sys.path)
    site.addsitedir(str(target))  # processes nvidia_cutlass_dsl's .pth, which adds its packages dir
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before
    return True, f"installed {len(wheels)} wheels into {target}: " + ", ".join(w.name for w in wheels)


def prepare_cudnn_import(wheel_dirs, site_dir: Path) -> tuple[str | None, list]:
    """Before `import cudnn` in the peer benchmarks: installs the wheels in wheel_dirs (when
    given) into site_dir. Returns (why not, or None; notes for the report)."""
    notes = []
    if wheel_dirs:
        ok, msg = install([Path(d) for d in wheel_dirs], site_dir)
        if not ok:
            return f"not installed: {msg}", notes
        notes.append(msg.split(":")[0])
    # tvm-ffi would JIT-build a torch extension (tens of seconds) on first import to speed up
    # DLPack exchange; the host-side saving does not show in device time, so skip the build.
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    return None, notes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="split wheels into part folders")
    p.add_argument("--src", type=Path, default=Path(".whl"))
    p.add_argument("--out", type=Path, default=Path(".whl/parts"))
    p.add_argument("--part-mib", type=float, default=56.0)
    s = sub.add_parser("stage", help="copy part folders into a directory that outlives the call")
    s.add_argument("parts", type=Path, nargs="+")
    s.add_argument("--to", type=Path, default=None, help="staging directory (default: a private tempfile.mkdtemp directory)")
    c = sub.add_parser("check", help="reassemble and verify without installing")
    c.add_argument("dirs", type=Path, nargs="+")
    a = ap.parse_args(argv)
    if a.cmd == "pack":
        for d in pack(a.src, a.out, a.part_mib):
            size = sum(f.stat().st_size for f in d.iterdir())
            print(f"{d}: {size / MIB:.1f} MiB, {len(list(d.iterdir()))} files")
    elif a.cmd == "stage":
        if a.to is None:
            a.to = Path(tempfile.mkdtemp(prefix="dsa_peers_stage."))
        stage(a.parts, a.to)
        print(f"staged {', '.join(map(str, a.parts))} into {a.to}: {sorted(os.listdir(a.to))}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            wheels, problems = assemble(a.dirs, Path(tmp))
            for w in wheels:
                print("ok", w.name)
            for pr in problems:
                print("PROBLEM", pr)
            return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
