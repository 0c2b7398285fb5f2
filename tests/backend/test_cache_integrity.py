"""The build cache trusts nothing it finds: every file of an entry is checked against the sha256
recorded when it was written, and any damage (a truncated or swapped file, garbled JSON, a
missing folder, an extra file) is a miss that rebuilds, says once what was wrong, and replaces
the entry."""

import json
import os
import shutil
import time
import warnings
from pathlib import Path

import pytest

from iree_dispatch.backend.cache import ENTRY_FILES, ENTRY_META, Cache, CacheWarning
from iree_dispatch.backend.pipeline import build

from ..support.build_cache import nvcc_runs, spec_of
from ..support.environment import needs_build_tools

pytestmark = needs_build_tools


@pytest.fixture(autouse=True)
def builds_only(monkeypatch):
    """These tests are about whole-build entries: a rebuild counts nvcc's runs, which compiled
    objects kept in the cache would save (test_cache_objects.py checks those)."""
    from iree_dispatch.backend import pipeline

    monkeypatch.setattr(pipeline, "OBJECT_CACHE", False)


def entries(folder: Path) -> list[Path]:
    return sorted((folder / "cache" / "entries").glob("[!.]*"))


def the_entry(folder: Path) -> Path:
    (entry,) = entries(folder)
    return entry


def build_logged(folder: Path, out: str = "out"):
    """A build whose progress messages are returned with its result."""
    said: list[str] = []
    result = build(spec_of(folder), folder / out / "m.vmfb", progress=said.append)
    return result, said


def damage_warnings(said: list[str]) -> list[str]:
    return [m for m in said if "build cache" in m and "damaged" in m]


def rebuilds_after(project: Path, damage, expect: str) -> None:
    """Builds, damages the entry with `damage(entry)`, and checks the next build rebuilds with
    one warning naming the entry and `expect`, writes the original bytes, and leaves an intact
    entry that the build after serves silently."""
    first, _ = build_logged(project)
    good = first.vmfb.read_bytes()
    entry = the_entry(project)
    damage(entry)
    again, said = build_logged(project)
    assert nvcc_runs(project) == 4 and set(again.timings) != {"cache"}
    (warning,) = damage_warnings(said)
    assert entry.name[:16] in warning and expect in warning, warning
    assert again.vmfb.read_bytes() == good
    assert Cache().verify(the_entry(project))["dependencies"]
    third, said = build_logged(project)
    assert set(third.timings) == {"cache"} and not damage_warnings(said) and third.vmfb.read_bytes() == good and nvcc_runs(project) == 4


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_vmfb_rebuilds(project):
    rebuilds_after(project, lambda e: truncate(e / ENTRY_FILES / "module.vmfb"), "files/module.vmfb changed")


def test_truncated_ptx_rebuilds(project):
    def damage(entry):
        (ptx,) = [p for p in (entry / ENTRY_FILES).rglob("*.ptx")][:1]
        truncate(ptx)

    rebuilds_after(project, damage, "changed")


def test_vmfb_swapped_from_another_entry_rebuilds(project):
    first, _ = build_logged(project)
    good = first.vmfb.read_bytes()
    (project / "scale.h").write_text("#define SCALE 3.0f\n")
    other, _ = build_logged(project)
    assert other.vmfb.read_bytes() != good and len(entries(project)) == 2
    (project / "scale.h").write_text("#define SCALE 2.0f\n")
    by_bytes = {(e / ENTRY_FILES / "module.vmfb").read_bytes(): e for e in entries(project)}
    shutil.copyfile(by_bytes[other.vmfb.read_bytes()] / ENTRY_FILES / "module.vmfb", by_bytes[good] / ENTRY_FILES / "module.vmfb")
    again, said = build_logged(project)
    (warning,) = damage_warnings(said)
    assert "module.vmfb changed" in warning and by_bytes[good].name[:16] in warning
    assert again.vmfb.read_bytes() == good and nvcc_runs(project) == 6


def test_whole_entry_swapped_in_under_another_key_is_a_miss(project):
    first, _ = build_logged(project)
    good = first.vmfb.read_bytes()
    (project / "scale.h").write_text("#define SCALE 3.0f\n")
    build_logged(project)
    (project / "scale.h").write_text("#define SCALE 2.0f\n")
    mine, other = sorted(entries(project), key=lambda e: (e / ENTRY_FILES / "module.vmfb").read_bytes() != good)
    shutil.rmtree(mine)
    shutil.copytree(other, mine)  # a consistent entry, but another build's
    again, said = build_logged(project)
    (warning,) = damage_warnings(said)
    assert "another entry" in warning and again.vmfb.read_bytes() == good


def test_garbled_meta_rebuilds(project):
    rebuilds_after(project, lambda e: truncate(e / ENTRY_META), "meta.json unreadable")


def test_edited_meta_rebuilds(project):
    def damage(entry):
        meta = json.loads((entry / ENTRY_META).read_text())
        meta["files"]["module.vmfb"] = "0" * 64
        (entry / ENTRY_META).write_text(json.dumps(meta))

    rebuilds_after(project, damage, "checksum")


def test_missing_meta_rebuilds(project):
    rebuilds_after(project, lambda e: (e / ENTRY_META).unlink(), "meta.json is missing")


def test_missing_files_folder_rebuilds(project):
    rebuilds_after(project, lambda e: shutil.rmtree(e / ENTRY_FILES), "files is missing")


def test_missing_file_rebuilds(project):
    rebuilds_after(project, lambda e: (e / ENTRY_FILES / "module.vmfb").unlink(), "files/module.vmfb is missing")


def test_extra_file_rebuilds(project):
    rebuilds_after(project, lambda e: (e / ENTRY_FILES / "m.objects" / "extra.ptx").write_text("// planted\n"), "files/m.objects/extra.ptx is not part of it")


def test_symlinked_file_rebuilds(project):
    def damage(entry):
        vmfb = entry / ENTRY_FILES / "module.vmfb"
        shutil.copyfile(vmfb, project / "copy.vmfb")
        vmfb.unlink()
        vmfb.symlink_to(project / "copy.vmfb")

    rebuilds_after(project, damage, "not a plain file")


@pytest.mark.parametrize("text", ["{", "[]", '{"dependencies": 5}', "\0\0\0"])
def test_garbled_manifest_rebuilds(project, text):
    first, _ = build_logged(project)
    (manifest,) = (project / "cache" / "manifests").glob("[!.]*.json")
    manifest.write_text(text)
    again, said = build_logged(project)
    (warning,) = [m for m in said if m.startswith("build cache: manifest")]
    assert str(manifest) in warning and "damaged" in warning
    assert again.vmfb.read_bytes() == first.vmfb.read_bytes() and nvcc_runs(project) == 4
    third, said = build_logged(project)
    assert set(third.timings) == {"cache"} and not [m for m in said if m.startswith("build cache: manifest")]


def test_damage_without_a_progress_callback_is_a_warning(project):
    build(spec_of(project), project / "m.vmfb")
    entry = the_entry(project)
    truncate(entry / ENTRY_FILES / "module.vmfb")
    with pytest.warns(CacheWarning, match="module.vmfb changed"):
        assert Cache().lookup(entry.name) is None
    assert not entry.exists()  # removed: the rebuild puts an intact one in its place
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Cache().lookup(entry.name) is None  # a plain miss now: no second warning


def test_cli_build_reports_damage_once_and_succeeds(project, capsys, monkeypatch):
    from iree_dispatch.cli import main

    spec = project / "m.toml"
    spec.write_text('[module]\nname = "m"\n\n[[kernel]]\nsource = "k.cu"\nname = "k"\nblock = 32\ngrid = 1\nshape = ["n"]\n')
    out = project / "cli" / "m.vmfb"
    assert main(["build", str(spec), "-o", str(out)]) == 0
    good = out.read_bytes()
    truncate(the_entry(project) / ENTRY_FILES / "module.vmfb")
    capsys.readouterr()
    assert main(["build", str(spec), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("damaged") == 1 and "Traceback" not in err and "up to date" not in err
    assert out.read_bytes() == good


def test_stale_temporaries_are_swept_on_store(project):
    build(spec_of(project), project / "m.vmfb")
    cache = project / "cache"
    old, fresh = cache / "entries" / ".new-old", cache / "entries" / ".new-fresh"
    for folder in (old, fresh):
        (folder / ENTRY_FILES).mkdir(parents=True)
        (folder / ENTRY_FILES / "module.vmfb").write_bytes(b"half")
    stale_manifest = cache / "manifests" / ".x.json.abc"
    stale_manifest.write_text("{")
    hours_ago = time.time() - 2 * 3600
    for path in (old, stale_manifest):
        os.utime(path, (hours_ago, hours_ago))
    (project / "scale.h").write_text("#define SCALE 5.0f\n")  # a miss: this build stores
    build(spec_of(project), project / "m.vmfb")
    assert not old.exists() and not stale_manifest.exists() and fresh.exists()
    assert len(entries(project)) == 2
