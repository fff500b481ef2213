"""Issue 16, install: the wheel and sdist from a clean clone, ``make install`` into a
fresh prefix, its systemd units, and the emulated demo run from the installed files only.

Dependencies: the prefix's venv gets the wheel with ``--no-deps`` and a ``.pth`` naming
the site-packages of the interpreter running these tests (which has every dependency),
so a test does not download ~140 packages (a full ``pip install`` of the wheel from the
PyPI mirror took 54 s here, docs/INSTALL.md).  Only this test does that; ``make
install`` installs the dependencies.  ``SDNMPI_INSTALL_FULL=1`` makes the tests do the
full install too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi import catalog
from sdnmpi.core.generators import leaf_spine
from sdnmpi.emu import agents, runner
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, make_plan
from sdnmpi.testing.waits import free_port, wait_for
from tests.emu.support import (
    assert_clean,
    daemon_pids,
    port_rx_bytes,
    require_root_and_tools,
    unique_name,
)

REPO = Path(__file__).resolve().parents[2]
UNITS = ("sdnmpi-controller.service", "sdnmpi-manager.service", "sdnmpi-agent@.service")
STUBS = ("sdnmpi/wire/manager_pb2.py", "sdnmpi/wire/manager_pb2_grpc.py")
FULL = os.environ.get("SDNMPI_INSTALL_FULL") == "1"


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """``argv`` in :func:`clean_env` unless ``env`` is given; it must succeed.  (With the
    test's PYTHONPATH=src, pip would take src/sdnmpi.egg-info for an installed sdnmpi.)"""
    kw.setdefault("env", clean_env())
    res = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    assert res.returncode == 0, f"{argv} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res  # type: ignore[no-any-return]


def clean_env() -> dict[str, str]:
    """The environment of a user of the installation: no checkout on the path, no
    variable pointing at a build tree."""
    drop = ("PYTHONPATH", "SDNMPI_LIBDIR", "SDNMPI_BUILD", "SDNMPI_BPF_DIR", "SDNMPI_IDLE_LIB")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("VIRTUAL")}


def reuse_deps(venv: Path) -> None:
    """Unless SDNMPI_INSTALL_FULL=1: the test interpreter's site-packages behind the
    venv's own (a ``.pth`` line is appended to sys.path, after the venv's packages)."""
    if FULL:
        return
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "zz-sdnmpi-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def pip_args() -> list[str]:
    return [] if FULL else ["--no-deps"]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean clone of this checkout's HEAD: no generated stubs, no build tree."""
    dest = tmp_path_factory.mktemp("clone") / "sdnmpi"
    run(["git", "clone", "--quiet", str(REPO), str(dest)])
    assert not list((dest / "src/sdnmpi/wire").glob("manager_pb2*")), "stubs are committed"
    return dest


@pytest.fixture(scope="module")
def wheel(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(clone)])
    (whl,) = out.glob("sdnmpi-*.whl")
    return whl


@pytest.mark.slow
def test_wheel_from_a_clean_clone_carries_the_stubs_and_runs(wheel: Path, tmp_path: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert set(STUBS) <= set(names), sorted(n for n in names if "wire" in n)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", *pip_args(), str(wheel)])
    reuse_deps(venv)
    env = clean_env()
    version = run([str(venv / "bin/sdnmpi"), "--version"], env=env, cwd=tmp_path)
    assert version.stdout.strip() == "sdnmpi 0.1.0"
    manager = run([str(venv / "bin/sdnmpi"), "manager", "--help"], env=env, cwd=tmp_path)
    assert "interconnect manager" in manager.stdout
    probe = "import sdnmpi.wire.manager_pb2_grpc as g, sdnmpi; print(g.__file__, sdnmpi.__file__)"
    where = run([str(venv / "bin/python"), "-c", probe], env=env, cwd=tmp_path).stdout.split()
    assert all(w.startswith(str(venv)) for w in where), where


@pytest.mark.slow
def test_sdist_carries_proto_not_stubs_and_builds_a_wheel_with_them(
    clone: Path, tmp_path: Path
) -> None:
    build = f"from setuptools import build_meta as b; print(b.build_sdist({str(tmp_path)!r}))"
    name = run([sys.executable, "-c", build], cwd=clone).stdout.strip().splitlines()[-1]
    sdist = tmp_path / name
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
    top = name.removesuffix(".tar.gz")
    assert f"{top}/proto/sdnmpi/wire/manager.proto" in members
    assert f"{top}/setup.py" in members and f"{top}/packaging/install.sh" in members
    assert not [m for m in members if "manager_pb2" in m], "generated stubs in the sdist"
    out = tmp_path / "from-sdist"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(sdist)])
    (whl,) = out.glob("sdnmpi-*.whl")
    assert set(STUBS) <= set(zipfile.ZipFile(whl).namelist())


@dataclass
class Installed:
    prefix: Path
    log: str

    @property
    def bin(self) -> Path:
        return self.prefix / "bin" / "sdnmpi"

    @property
    def libdir(self) -> Path:
        return self.prefix / "lib" / "sdnmpi"

    @property
    def python(self) -> Path:
        return self.libdir / "venv" / "bin" / "python"


def make_install(prefix: Path, wheel: Path, destdir: Path | None = None) -> str:
    argv = ["make", "-s", "-C", str(REPO), "install", f"PREFIX={prefix}", f"WHEEL={wheel}"]
    argv += [f"PYTHON={sys.executable}", f"PIP_ARGS={' '.join(pip_args())}"]
    if destdir is not None:
        argv.append(f"DESTDIR={destdir}")
    res = run(argv)
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Installed:
    """``make install PREFIX=<fresh>`` from this working tree (make csrc first)."""
    prefix = tmp_path_factory.mktemp("prefix") / "sdnmpi"
    log = make_install(prefix, wheel)
    reuse_deps(prefix / "lib" / "sdnmpi" / "venv")
    return Installed(prefix, log)


@pytest.mark.toolchain
@pytest.mark.slow
def test_make_install_puts_every_part_where_the_docs_say(installed: Installed) -> None:
    lib, p = installed.libdir, installed.prefix
    for part in ("bpf/tagger.bpf.o", "bpf/ecn.bpf.o", "openmpi/libsdnmpi.so",
                 "openmpi/sdnmpi-bench", "spank/sdnmpi_spank.so", "doc/INSTALL.md"):  # fmt: skip
        assert (lib / part).is_file(), part
    assert os.access(p / "bin" / "sdnmpi-bench-openmpi", os.X_OK)
    snippet = (p / "etc/slurm/plugstack.conf.d/sdnmpi.conf").read_text()
    assert f"optional {lib}/spank/sdnmpi_spank.so manager=unix:/run/sdnmpi/manager.sock" in snippet
    assert json.loads((lib / "sdnmpi-install.json").read_text())["libdir"] == str(lib)
    for unit in UNITS:
        text = (p / "lib/systemd/system" / unit).read_text()
        assert not re.findall(r"@[A-Z]+@", text), unit  # every placeholder replaced
        assert f"ExecStart={p}/bin/sdnmpi " in text
        assert f"--config {p}/etc/sdnmpi/sdnmpi.toml" in text
    # the installed code finds the installed objects, from anywhere, without variables
    probe = ("from sdnmpi import artefacts; from sdnmpi.node import libbpf; "
             "from sdnmpi.emu import idle; print(artefacts.root()); "
             "print(libbpf.object_path('tagger.bpf.o')); print(idle.find_library())")  # fmt: skip
    out = run([str(installed.python), "-c", probe], env=clean_env(), cwd="/").stdout.split()
    assert out == [str(lib), str(lib / "bpf/tagger.bpf.o"), str(lib / "idle/libsdnmpi_idle.so")]


@pytest.mark.toolchain
@pytest.mark.slow
def test_destdir_stages_without_leaking_into_the_files(
    installed: Installed, wheel: Path, tmp_path: Path
) -> None:
    """A packager's staged install: files under DESTDIR, no file names DESTDIR."""
    prefix = Path("/opt/sdnmpi-stage-test")
    make_install(prefix, wheel, destdir=tmp_path)
    staged = tmp_path / prefix.relative_to("/")
    assert (staged / "lib/sdnmpi/bpf/tagger.bpf.o").is_file()
    assert not prefix.exists()
    # grep -l lists the files that name the staging directory (compiled .pyc aside)
    res = subprocess.run(["grep", "-rlIF", str(tmp_path), str(tmp_path)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    leaks = [f for f in res.stdout.split() if not f.endswith(".pyc")]
    assert leaks == [], leaks
    script = (staged / "lib/sdnmpi/venv/bin/sdnmpi").read_text().splitlines()[0]
    assert script == f"#!{prefix}/lib/sdnmpi/venv/bin/python", script


def _verify(paths: list[Path]) -> str:
    """``systemd-analyze verify``: its complaints about our units (it exits 0 on an
    unknown key and only says so)."""
    res = subprocess.run(["systemd-analyze", "verify", *map(str, paths)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    ours = [ln for ln in (res.stdout + res.stderr).splitlines() if "sdnmpi" in ln or "bad" in ln]
    return f"rc={res.returncode} " + "\n".join(ours)


@pytest.mark.toolchain
@pytest.mark.slow
def test_installed_units_pass_systemd_analyze_verify(installed: Installed, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze missing: apt-get install -y systemd")
    units = installed.prefix / "lib/systemd/system"
    paths = [units / "sdnmpi-controller.service", units / "sdnmpi-manager.service",
             units / "sdnmpi-agent@eth1.service"]  # fmt: skip
    assert _verify(paths) == "rc=0 "
    # the check can fail: an unknown key, and an ExecStart that is not installed
    bad = tmp_path / "bad@.service"
    text = (units / "sdnmpi-agent@.service").read_text()
    bad.write_text(text.replace("NoNewPrivileges=", "NoNewPrivilege="))
    assert "Unknown key 'NoNewPrivilege'" in _verify([tmp_path / "bad@eth1.service"])
    missing = tmp_path / "missing.service"
    missing.write_text(text.replace(f"{installed.prefix}/bin/sdnmpi", "/nonexistent/sdnmpi"))
    assert _verify([missing]).startswith("rc=1")


def _exposure(unit: Path) -> float:
    res = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: ([\d.]+)", res.stdout)
    assert found, res.stdout + res.stderr
    return float(found.group(1))


@pytest.mark.toolchain
@pytest.mark.slow
def test_units_hold_only_the_capabilities_they_need(installed: Installed) -> None:
    units = installed.prefix / "lib/systemd/system"

    def settings(unit: str, key: str) -> list[str]:
        text = (units / unit).read_text()
        return re.findall(rf"^{key}=(.*)$", text, re.MULTILINE)

    for unit in ("sdnmpi-controller.service", "sdnmpi-manager.service"):
        assert settings(unit, "CapabilityBoundingSet") == [""], unit
        assert settings(unit, "User") == ["sdnmpi"], unit
    agent_caps = {"CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN", "CAP_SYS_PTRACE"}
    (bounding,) = settings("sdnmpi-agent@.service", "CapabilityBoundingSet")
    assert set(bounding.split()) == agent_caps
    for unit in UNITS:
        assert settings(unit, "NoNewPrivileges") == ["yes"], unit
        assert settings(unit, "ProtectSystem") == ["strict"], unit
    # systemd's own score (0 = fully confined, 10 = unconfined); measured 1.4, 1.6, 4.2
    scores = {u: _exposure(units / u) for u in UNITS}
    print(f"\nsystemd-analyze security exposure: {scores}")
    assert scores["sdnmpi-controller.service"] <= 2.0
    assert scores["sdnmpi-manager.service"] <= 2.0
    assert scores["sdnmpi-agent@.service"] <= 5.0


# --- the demo from the installed files only ------------------------------------------


class InstalledController:
    """The installed ``sdnmpi controller run`` as our child, stopped by its PID."""

    def __init__(self, inst: Installed, workdir: Path, topology: Path, *extra: str) -> None:
        self.port = free_port()
        self.api_path = workdir / "api.sock"
        self.log_path = workdir / "controller.log"
        argv = [str(inst.bin), "controller", "run", "--port", str(self.port), "--topology",
                str(topology), "--api-socket", str(self.api_path), "--stats-interval", "1",
                *extra]  # fmt: skip
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=clean_env(), cwd=workdir
            )
        wait_for("the controller to listen", lambda: "listening on" in self.log(), 30)

    def log(self) -> str:
        if self.proc.poll() is not None:
            raise AssertionError(f"controller exited:\n{self.log_path.read_text()}")
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)


@pytest.fixture
def demo_fabric(
    installed: Installed, tmp_path: Path
) -> Iterator[tuple[Path, str, InstalledController]]:
    require_root_and_tools()
    model = leaf_spine(2, 2, 2)
    topo = tmp_path / "topology.json"
    catalog.save_topology(model, topo)
    plan = make_plan(model, unique_name("inst"), state_root=DEFAULT_STATE_ROOT)
    cli = [str(installed.bin)]
    env = clean_env()
    pinned = ("--primitives", "bcast=pinned:spine1,reduce=pinned:spine2")
    ctl = InstalledController(installed, tmp_path, topo, *pinned)
    pids: list[int] = []
    try:
        run([*cli, "emu", "up", "--topology", str(topo), "--name", plan.name,
             "--controller", f"tcp:127.0.0.1:{ctl.port}"], env=env, cwd=tmp_path)  # fmt: skip
        pids = daemon_pids(plan)
        wait_for("LLDP discovery", lambda: "discovery complete" in ctl.log(), 60)
        run([*cli, "emu", "agents", "up", "--name", plan.name, "--controller-api",
             str(ctl.api_path)], env=env, cwd=tmp_path)  # fmt: skip
        yield tmp_path, plan.name, ctl
    finally:
        subprocess.run([*cli, "emu", "agents", "down", "--name", plan.name], env=env,
                       capture_output=True, check=False)  # fmt: skip
        ctl.stop()
        runner.down(plan.name)
        assert_clean(plan, pids)


@pytest.mark.root
@pytest.mark.toolchain
@pytest.mark.integration
@pytest.mark.slow
def test_demo_runs_from_the_installed_files_only(
    installed: Installed, demo_fabric: tuple[Path, str, InstalledController]
) -> None:
    """Controller, fabric (ECN marker), node agents (tagger) and a real Open MPI job
    under LD_PRELOAD=libsdnmpi.so (tag mode), every program and object from the prefix:
    the Bcast loop's packets are tagged and cross spine1, as the pinned module says."""
    workdir, name, ctl = demo_fabric
    lib = installed.libdir / "openmpi"
    plan = make_plan(leaf_spine(2, 2, 2), name, state_root=DEFAULT_STATE_ROOT)
    spine1 = next(b.bridge for b in plan.bridges if b.switch == "spine1")
    spine2 = next(b.bridge for b in plan.bridges if b.switch == "spine2")
    size, iters = 1 << 20, 8
    sock = agents.socket_template(plan)
    env = [f"LD_PRELOAD={lib / 'libsdnmpi.so'}", "SDNMPI_MODE=tag", "SDNMPI_JOB=installed",
           f"SDNMPI_AGENT_SOCKET={sock}"]  # fmt: skip
    before = (sum(port_rx_bytes(plan, spine1).values()), sum(port_rx_bytes(plan, spine2).values()))
    argv = [str(installed.bin), "emu", "mpirun", "--name", name, "-n", "2", "--mpi", "openmpi",
            "--hosts", "h1,h3", "--timeout", "90", *(a for e in env for a in ("--env", e)),
            "--", str(lib / "sdnmpi-bench"), "coll", "--op", "bcast", "--size", str(size),
            "--iters", str(iters), "--warmup", "1", "--json"]  # fmt: skip
    res = run(argv, env=clean_env(), cwd=workdir, timeout=150)
    after = (sum(port_rx_bytes(plan, spine1).values()), sum(port_rx_bytes(plan, spine2).values()))
    moved = {"spine1": after[0] - before[0], "spine2": after[1] - before[1]}
    print(f"\ninstalled demo: spine bytes during the Bcast loop {moved}\n{res.stdout[-600:]}")
    assert "running untagged" not in res.stderr, res.stderr
    assert moved["spine1"] >= size * iters and moved["spine2"] < size * iters // 10, moved
    assert "listening on" in ctl.log()  # and the installed controller still runs
