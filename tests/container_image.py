"""The CPU component image for the container tests, built once per content (stdlib only).

`ensure_image()` returns the tag ``localhost/pflpipe-test:cpu-<hash>``, where the hash covers
what the build reads: images/Dockerfile.cpu, every file of the build context (as .dockerignore
admits them) and the build arguments. An image of that tag is reused; otherwise it is built
(podman, else docker), under a lock, so a second caller waits for the first one's build.

Build arguments: where this machine holds a local package index with torch (/opt/pypi-more, the
machines of our CI), it is served over HTTP on 127.0.0.1 for the build's duration and is pip's
index (PIP_INDEX_URL), PyPI an extra index for what it lacks, and torch comes from pip's index
(TORCH_INDEX_URL empty): a build behind a mirror, as docs/images.md describes. Elsewhere the
Dockerfile's defaults (torch from PyTorch's CPU index). A local stand-in of the base image
(`container-engine.sh` builds localhost/python:3.11-slim-bookworm) is used when present.

`python3 tests/container_image.py` builds it (.ci/run starts that beside the test suite) and
prints the tag, the build's seconds and the image's size.
"""

import contextlib
import fcntl
import fnmatch
import functools
import hashlib
import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "images" / "Dockerfile.cpu"
REPOSITORY = "localhost/pflpipe-test"
#: Local package indexes (each a PEP 503 `simple/` beside its `files/`), the first holding torch.
LOCAL_INDEXES = (Path("/opt/pypi-more"), Path("/opt/pypi"))
STAND_IN_BASE = "localhost/python:3.11-slim-bookworm"
LOCK = Path(tempfile.gettempdir()) / "pflpipe-test-image.lock"


def builder() -> str | None:
    """The engine command that builds images here: podman, else docker (None: neither)."""
    return next((tool for tool in ("podman", "docker") if shutil.which(tool)), None)


# --- the build context, as .dockerignore admits it ------------------------------------------------

def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def docker_ignores(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore `patterns` leave `path` out of the context (last match wins)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.removeprefix("!").strip("/")
        if any(fnmatch.fnmatchcase(p, glob) or fnmatch.fnmatchcase(p, glob.removeprefix("**/"))
               for p in prefixes):
            ignored = not negated
    return ignored


def context_files() -> list[str]:
    """The repository's files that enter the build context, sorted."""
    patterns = dockerignore_patterns()
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv")]
        for name in files:
            path = (Path(folder) / name).relative_to(REPO).as_posix()
            if not docker_ignores(path, patterns):
                found.append(path)
    return sorted(found)


def content_hash(build_args: dict[str, str]) -> str:
    """SHA-256 of the Dockerfile, the context's files (names and bytes) and the arguments."""
    digest = hashlib.sha256(DOCKERFILE.read_bytes())
    digest.update(json.dumps(build_args, sort_keys=True).encode())
    for path in context_files():
        digest.update(path.encode() + b"\0" + (REPO / path).read_bytes() + b"\0")
    return digest.hexdigest()


# --- a mirror of the local indexes, and the build arguments ---------------------------------------

def has_local_indexes() -> bool:
    return (LOCAL_INDEXES[0] / "simple" / "torch").is_dir()


#: Stands for the mirror's address (its port may differ between builds) in the arguments' hash.
MIRROR = "http://mirror"


def build_args(tool: str, mirror: str = MIRROR) -> dict[str, str]:
    """The build arguments on this machine (see the module's docstring)."""
    args = {}
    if _image_exists(tool, STAND_IN_BASE):
        args["BASE_IMAGE"] = STAND_IN_BASE
    if has_local_indexes():
        first, *rest = (f"{mirror}/{index.name}/simple" for index in LOCAL_INDEXES)
        args |= {"PIP_INDEX_URL": first,
                 "PIP_EXTRA_INDEX_URL": " ".join([*rest, "https://pypi.org/simple"]),
                 "TORCH_INDEX_URL": ""}
    return args


@contextlib.contextmanager
def mirror() -> Iterator[str]:
    """Serve `LOCAL_INDEXES` at http://127.0.0.1:<free port>/<name>/simple; yield its address."""
    if not has_local_indexes():
        yield MIRROR
        return
    with tempfile.TemporaryDirectory() as root:
        for index in LOCAL_INDEXES:
            (Path(root) / index.name).symlink_to(index)
        handler = functools.partial(_QuietHandler, directory=root)
        with _server(handler) as server:
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            try:
                yield f"http://127.0.0.1:{server.server_address[1]}"
            finally:
                server.shutdown()


#: The mirror's port when it is free, else any free port. The engine's layer cache keys a step on
#: its build arguments, the mirror's address among them: with the same port, a build for changed
#: sources reuses the torch layer (gigabytes) of an earlier one.
MIRROR_PORT = 38417


def _server(handler) -> socketserver.ThreadingTCPServer:
    try:
        return socketserver.ThreadingTCPServer(("127.0.0.1", MIRROR_PORT), handler)
    except OSError:   # taken: any free port
        return socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# --- build once per content -----------------------------------------------------------------------

def _image_exists(tool: str, tag: str) -> bool:
    command = [tool, "image", "exists", tag] if tool == "podman" else [tool, "image", "inspect",
                                                                        tag]
    return subprocess.run(command, capture_output=True).returncode == 0


def image_size(tool: str, tag: str) -> int:
    done = subprocess.run([tool, "image", "inspect", "--format", "{{.Size}}", tag],
                          capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


def ensure_image(log=print) -> str:
    """Return the tag of the CPU image of this checkout, building it if it is not there.

    Raises:
        RuntimeError: no engine to build with, or the build failed (with its log's tail).

    """
    tool = builder()
    if tool is None:
        raise RuntimeError("neither podman nor docker is installed")
    args = build_args(tool)
    tag = f"{REPOSITORY}:cpu-{content_hash(args)[:16]}"
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another process building the same: wait for it
        if _image_exists(tool, tag):
            log(f"image {tag} is there (built for this content before)")
            return tag
        started = time.monotonic()
        with mirror() as address, tempfile.TemporaryFile("w+") as output:
            command = [tool, "build", "--network", "host", "-f", str(DOCKERFILE), "-t", tag,
                       *(["--pull=never"] if tool == "podman" else []),
                       *(f"--build-arg={key}={value}"
                         for key, value in build_args(tool, address).items()), str(REPO)]
            done = subprocess.run(["nice", "-n", "10", *command], stdout=output,
                                  stderr=subprocess.STDOUT)
            output.seek(0)
            text = output.read()
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{text[-4000:]}")
        _remove_other_builds(tool, tag)
        check = next((line for line in text.splitlines() if line.startswith("image check:")), "")
        log(f"built {tag} in {time.monotonic() - started:.0f} s; size "
            f"{image_size(tool, tag) / 1e9:.2f} GB; {check}")
        return tag


def _remove_other_builds(tool: str, tag: str) -> None:
    """Untag the builds of other contents (their layers shared with `tag` stay)."""
    listed = subprocess.run([tool, "images", "--format", "{{.Repository}}:{{.Tag}}",
                             REPOSITORY], capture_output=True, text=True)
    others = [name for name in listed.stdout.split() if name.startswith(f"{REPOSITORY}:cpu-")
              and name != tag]
    if others:
        subprocess.run([tool, "rmi", *others], capture_output=True)


if __name__ == "__main__":
    try:
        ensure_image()
    except RuntimeError as err:
        print(f"container image: {err}", file=sys.stderr)
        sys.exit(1)
