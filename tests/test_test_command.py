"""``scripts/test``, the README's test command, run against a fake machine.

The script runs as a real process with ``PATH`` holding only shims: an
``id`` that says who we are, an ``apt-get`` and a ``sudo`` that record what
they were asked, the commands of the packages "installed", and a ``python3``
whose virtual environment records every command. Nothing is installed, and
the machine's own packages are never touched.
"""

from __future__ import annotations

import pathlib
import shutil
import stat
import subprocess
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "test"
#: The real tools the script uses before it reaches Python.
TOOLS = ("dirname", "cat", "env")
#: Each system package and the command that shows it is installed.
COMMANDS = {
    "chromium": "chromium",
    "chromium-driver": "chromedriver",
    "nginx": "nginx",
    "redis-server": "redis-server",
}


def _real(tool: str) -> str:
    """The machine's own ``tool``, by absolute path: the shims' PATH has none."""
    found = shutil.which(tool)
    assert found is not None, tool
    return found


def _shim(directory: pathlib.Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class Machine:
    """A temporary directory posing as a machine with some of the packages."""

    def __init__(
        self, root: pathlib.Path, *, uid: int, installed: set[str], sudo: bool, cpus: int = 2
    ) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.log = root / "log"
        self.log.touch()
        self.venv = root / "venv"
        #: What the venv says of its llmrt install: "yes" for an editable one.
        self.editable = root / "editable"
        self.editable.write_text("no\n")
        for tool in TOOLS:
            (self.bin / tool).symlink_to(_real(tool))
        chmod, mkdir, cp = _real("chmod"), _real("mkdir"), _real("cp")
        _shim(self.bin, "id", f'[ "$1" = -u ] && echo {uid}\n')
        _shim(self.bin, "nproc", f"echo {cpus}\n")
        for package in installed:
            _shim(self.bin, COMMANDS[package], "exit 0\n")
        # apt-get "installs" a package by putting its command on PATH.
        installs = "\n".join(
            f'    {pkg}) echo exit 0 >"{self.bin}/{cmd}"; {chmod} +x "{self.bin}/{cmd}";;'
            for pkg, cmd in COMMANDS.items()
        )
        _shim(
            self.bin,
            "apt-get",
            f"""\
            echo "apt-get $* (DEBIAN_FRONTEND=${{DEBIAN_FRONTEND-}})" >>"{self.log}"
            [ "$1" = install ] || exit 0
            for arg; do
                case $arg in
            {installs}
                esac
            done
            """,
        )
        if sudo:
            _shim(self.bin, "sudo", f'echo "sudo $*" >>"{self.log}"\nshift\n"$@"\n')
        # The venv's python: records its arguments, answers the script's two questions.
        _shim(
            self.bin.parent,
            "venv-python",
            f"""\
            echo "venv-python $*" >>"{self.log}"
            case $1 in
                -I) cat >/dev/null; cat "{self.editable}";;
                -c) echo fake-pyproject-digest;;
            esac
            """,
        )
        _shim(
            self.bin,
            "python3",
            f"""\
            echo "python3 $*" >>"{self.log}"
            {mkdir} -p "{self.venv}/bin"
            {cp} "{self.bin.parent}/venv-python" "{self.venv}/bin/python"
            """,
        )

    def make_venv(self) -> None:
        (self.venv / "bin").mkdir(parents=True)
        shutil.copy(self.bin.parent / "venv-python", self.venv / "bin" / "python")

    def run(
        self, *args: str, jobs: str | None = None, **environ: str
    ) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": str(self.bin),
            "HOME": str(self.bin.parent),
            "LLMRT_VENV": str(self.venv),
            # Only PATH is searched: the real machine's /usr/sbin/nginx must not count.
            "LLMRT_SYSTEM_DIRS": "",
        }
        if jobs is not None:
            env["LLMRT_TEST_JOBS"] = jobs
        env.update(environ)
        bash = shutil.which("bash")
        assert bash is not None
        return subprocess.run(
            [bash, str(SCRIPT), *args],
            env=env,
            cwd=self.bin.parent,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def calls(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


def test_without_root_a_missing_package_stops_before_pytest(tmp_path: pathlib.Path) -> None:
    machine = Machine(tmp_path, uid=1000, installed={"chromium", "chromium-driver"}, sudo=False)
    result = machine.run("-q", "-x")
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert result.stderr == (
        "scripts/test: the tests need these system packages, which are not installed: "
        "nginx redis-server\n"
        "Install them as root, then run scripts/test again:\n"
        "    sudo apt-get update && sudo apt-get install -y --no-install-recommends "
        "nginx redis-server\n"
    )
    # Nothing ran: no package manager, no virtual environment, no pytest.
    assert machine.calls() == []
    assert not machine.venv.exists()


def test_a_sudo_that_asks_for_a_password_counts_as_no_root(tmp_path: pathlib.Path) -> None:
    machine = Machine(tmp_path, uid=1000, installed=set(), sudo=False)
    _shim(machine.bin, "sudo", f'echo "sudo $*" >>"{machine.log}"\nexit 1\n')
    result = machine.run()
    assert result.returncode == 2, result
    assert "not installed: chromium chromium-driver nginx redis-server\n" in result.stderr
    assert machine.calls() == ["sudo -n true"]


def test_without_apt_get_the_packages_are_named(tmp_path: pathlib.Path) -> None:
    machine = Machine(tmp_path, uid=0, installed={"chromium", "chromium-driver"}, sudo=False)
    (machine.bin / "apt-get").unlink()
    result = machine.run()
    assert result.returncode == 2, result
    assert result.stderr == (
        "scripts/test: the tests need these packages, which are not installed: "
        "nginx redis-server (Debian's names); install them, then run scripts/test again\n"
    )
    assert machine.calls() == []


@pytest.mark.parametrize(("uid", "sudo"), [(0, False), (1000, True)], ids=["root", "sudo"])
def test_missing_packages_are_installed_then_pytest_runs(
    tmp_path: pathlib.Path, uid: int, sudo: bool
) -> None:
    machine = Machine(tmp_path, uid=uid, installed={"nginx"}, sudo=sudo)
    result = machine.run("-q", "tests/test_demo.py")
    assert result.returncode == 0, result
    calls = machine.calls()
    assert [c for c in calls if c.startswith("apt-get")] == [
        "apt-get update -q (DEBIAN_FRONTEND=)",
        "apt-get install -y -q --no-install-recommends chromium chromium-driver redis-server"
        " (DEBIAN_FRONTEND=noninteractive)",
    ]
    # Without root, through the password-less sudo: checked first, then used for both.
    assert [c.split(" apt-get")[0] for c in calls if c.startswith("sudo")] == (
        ["sudo -n true", "sudo -n", "sudo -n env DEBIAN_FRONTEND=noninteractive"] if sudo else []
    )
    venv_calls = [c for c in machine.calls() if c.startswith(("python3", "venv-python"))]
    assert venv_calls == [
        f"python3 -m venv {machine.venv}",
        "venv-python -I -",
        "venv-python -c " + venv_calls[2].removeprefix("venv-python -c "),
        "venv-python -m pip install -q .[test]",
        # pytest last, on two processes per CPU by file, with the arguments given.
        "venv-python -m pytest -n 4 --dist loadfile -q tests/test_demo.py",
    ]


def test_with_every_package_present_nothing_is_installed(tmp_path: pathlib.Path) -> None:
    machine = Machine(tmp_path, uid=0, installed=set(COMMANDS), sudo=False)
    machine.make_venv()  # an existing venv
    result = machine.run("-k", "demo")
    assert result.returncode == 0, result
    assert not any("apt-get" in c for c in machine.calls())
    # The venv existed: not created again; the project is installed, then pytest runs.
    assert not any(c.startswith("python3 -m venv") for c in machine.calls())
    assert machine.calls()[-1] == "venv-python -m pytest -n 4 --dist loadfile -k demo"


@pytest.mark.parametrize(("cpus", "jobs"), [(1, 2), (3, 6), (4, 8), (16, 8)])
def test_pytest_runs_on_two_processes_per_cpu_at_most_eight(
    tmp_path: pathlib.Path, cpus: int, jobs: int
) -> None:
    machine = Machine(tmp_path, uid=0, installed=set(COMMANDS), sudo=False, cpus=cpus)
    machine.make_venv()
    result = machine.run("-q")
    assert result.returncode == 0, result
    assert machine.calls()[-1] == f"venv-python -m pytest -n {jobs} --dist loadfile -q"


def test_an_editable_install_stays_editable_and_is_refreshed_with_pyproject(
    tmp_path: pathlib.Path,
) -> None:
    machine = Machine(tmp_path, uid=0, installed=set(COMMANDS), sudo=False)
    machine.make_venv()
    machine.editable.write_text("yes\n")
    editable = "venv-python -m pip install -q -e .[test] --config-settings editable_mode=strict"
    assert machine.run().returncode == 0
    assert [c for c in machine.calls() if "pip" in c] == [editable]
    # Run again with the same pyproject.toml: nothing to install.
    machine.log.write_text("")
    assert machine.run().returncode == 0
    assert [c for c in machine.calls() if "pip" in c] == []
    assert machine.calls()[-1] == "venv-python -m pytest -n 4 --dist loadfile"


@pytest.mark.parametrize(
    ("args", "jobs", "pytest"),
    [
        ((), "3", "-n 3 --dist loadfile"),
        ((), "0", "-n 0 --dist loadfile"),
        (("-n", "3", "-q"), None, "-n 3 -q"),
        (("-n1",), "4", "-n1"),
        (("--numprocesses=auto",), None, "--numprocesses=auto"),
        (("-p", "no:xdist", "-x"), None, "-p no:xdist -x"),
        (("-k", "n"), None, "-n 4 --dist loadfile -k n"),
    ],
    ids=["jobs", "jobs-0", "caller-n", "caller-n1", "numprocesses", "no-xdist", "not-an-n"],
)
def test_pytest_runs_on_test_jobs_processes_unless_the_caller_chooses(
    tmp_path: pathlib.Path, args: tuple[str, ...], jobs: str | None, pytest: str
) -> None:
    machine = Machine(tmp_path, uid=0, installed=set(COMMANDS), sudo=False)
    machine.make_venv()
    result = machine.run(*args, jobs=jobs)
    assert result.returncode == 0, result
    assert machine.calls()[-1] == f"venv-python -m pytest {pytest}"


@pytest.mark.parametrize(
    ("environ", "seen"),
    [
        ({}, "unset unset"),
        ({"PYTHONDONTWRITEBYTECODE": "1"}, "unset {venv}/pycache"),
        ({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/c"}, "unset /c"),
        ({"PYTHONPYCACHEPREFIX": "/c"}, "unset /c"),
    ],
    ids=["plain", "dont-write", "dont-write-with-prefix", "prefix"],
)
def test_pytest_runs_with_a_bytecode_cache_never_beside_the_sources_when_told_not_to(
    tmp_path: pathlib.Path, environ: dict[str, str], seen: str
) -> None:
    machine = Machine(tmp_path, uid=0, installed=set(COMMANDS), sudo=False)
    machine.make_venv()
    python = machine.venv / "bin" / "python"
    python.write_text(
        python.read_text(encoding="utf-8").replace(
            'echo "venv-python $*"',
            'echo "venv-python $* (${PYTHONDONTWRITEBYTECODE-unset} ${PYTHONPYCACHEPREFIX-unset})"',
        ),
        encoding="utf-8",
    )
    result = machine.run("-q", **environ)
    assert result.returncode == 0, result
    expected = seen.format(venv=machine.venv)
    assert machine.calls()[-1] == f"venv-python -m pytest -n 4 --dist loadfile -q ({expected})"
