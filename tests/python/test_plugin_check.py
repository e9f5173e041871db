"""``kabi plugins check``: each plugin library is loaded in a child process, so one that crashes is named instead of
taking the caller down; and ``kabi info`` keeps a refused plugin apart from a loaded one of the same name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import _cmake
from kabi._plugins.check import PluginVerdict, check_plugins
from kabi.cli import main


@pytest.fixture(scope="module")
def plugins(tmp_path_factory) -> dict[str, str]:
    return _cmake.build_abi_test_plugins(tmp_path_factory.mktemp("check_plugins"))


def test_each_plugin_gets_its_verdict(plugins):
    good, refused, failing, crashing = check_plugins(
        [plugins["good"], plugins["next_major"], plugins["failing_init"], plugins["crashing_init"]])
    assert good == PluginVerdict(plugins["good"], "loaded", "abi-test-good", good.version,
                                 ("abi_test_good_double/abi_test_good.double",))
    assert (refused.state, failing.state) == ("refused", "refused")
    assert "major" in refused.message.lower()
    assert "the accelerator did not answer" in failing.message
    assert (crashing.state, crashing.message) == ("crashed", "killed by SIGSEGV")


def test_a_plugin_that_does_not_finish_loading_times_out(plugins):
    [verdict] = check_plugins([plugins["good"]], timeout_s=0.01)
    assert verdict.state == "timed out" and "0.01 s" in verdict.message


def test_the_command_names_the_crashing_plugin_and_exits_1(plugins, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    status = main(["plugins", "check", plugins["good"], plugins["crashing_init"]])
    output = capsys.readouterr().out
    assert status == 1
    assert "crashed" in output and "SIGSEGV" in output and "abi-test-crashing-init" not in output
    assert main(["plugins", "check", plugins["good"]]) == 0


def test_the_command_refuses_a_bad_timeout(plugins, capsys):
    assert main(["plugins", "check", plugins["good"], "--timeout-s", "0"]) == 2
    assert capsys.readouterr().err == "error: --timeout-s must be a number of seconds > 0, got 0\n"


def test_info_shows_no_kernels_for_a_refused_plugin_named_like_a_loaded_one(plugins, tmp_path):
    twin = tmp_path / "libtwin_of_good.so"
    shutil.copy(plugins["good"], twin)
    environment = {**os.environ, "KABI_PLUGIN_PATH": f"{plugins['good']}:{twin}", "COLUMNS": "400"}
    result = subprocess.run([sys.executable, "-m", "kabi.cli", "info"], env=environment, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.lstrip("│ ").startswith("abi-test-good")]
    loaded = [row for row in rows if "loaded" in row]
    refused = [row for row in rows if "refused" in row]
    assert len(loaded) == 1 and len(refused) == 1
    assert "abi_test_good_double/abi_test_good.double" in loaded[0]
    assert "abi_test_good.double" not in refused[0]
