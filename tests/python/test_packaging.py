"""The package as users install it: pip (offline, no build isolation) and cmake --install, each
imported from where it was put, not from the build tree."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("HETPS_BINARY_DIR", os.path.join(ROOT, "build"))

# Imports the installed package and runs a one-shard job with it through its own launcher.
CHECK = """
import os, sys, hetps, hetps.torch, hetps.run
assert hetps.__file__.startswith(sys.argv[1]), hetps.__file__
print("transports", hetps.available_transports())
"""


def installed_env(path, ps_server):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = path
    env["HETPS_PS_SERVER"] = ps_server
    return env


def check_installed(path, ps_server=os.path.join(BUILD, "server", "ps-server")):
    result = subprocess.run([sys.executable, "-c", CHECK, path], env=installed_env(path, ps_server),
                            capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "grpc" in result.stdout
    # The launcher and client from the installed copy against a real shard.
    job = subprocess.run(
        [sys.executable, "-m", "hetps.run", "--shards", "1", "--workers", "1", "--",
         sys.executable, "-c",
         "import hetps; c = hetps.Client(hetps.options_from_env()); print(c.stats()[0])"],
        env=installed_env(path, ps_server), capture_output=True, text=True, timeout=60, cwd="/")
    assert job.returncode == 0, job.stdout + job.stderr
    assert "ShardStats(shard_index=0" in job.stdout


def test_pip_installs_the_package_offline(tmp_path):
    target = str(tmp_path / "site")
    env = dict(os.environ, HETPS_BUILD_DIR=BUILD)  # reuse this build: only _hetps is made
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
         "--no-index", "--target", target, ROOT],
        env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    check_installed(target)


def test_cmake_install_puts_the_package_under_the_prefix(tmp_path):
    prefix = tmp_path / "prefix"
    result = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    found = list(prefix.glob("lib*/python3*/dist-packages/hetps/_hetps*.so"))
    assert len(found) == 1, list(prefix.rglob("*hetps*"))
    # ps-server comes from the same prefix.
    check_installed(str(found[0].parent.parent), str(prefix / "bin" / "ps-server"))
