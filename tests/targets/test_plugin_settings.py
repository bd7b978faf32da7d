"""A plugin target's own settings section: given in Python, in TOML or as a CLI flag it resolves to
the same Settings, the lowering reads it, it lands in the manifest and in the cache key, and so does
the plugin's version. The plugin (``my_pkg``, distribution my-pkg) lives in a temporary site
directory seen only by a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import ROOT, run_python
from tests.targets.test_registry import make_site

RESOLVE = """
import argparse, json
import fxdeploy, my_pkg
from examples import models
from fxdeploy.cli import settings as cli_settings
from fxdeploy.settings import CacheSettings

def resolve(argv):
    parser = argparse.ArgumentParser()
    cli_settings.add_arguments(parser)
    return cli_settings.resolve(parser.parse_args(argv))

python = fxdeploy.Settings().with_sections(mypkg=my_pkg.MySettings(level=3))
ways = {{
    "python": python,
    "dict": fxdeploy.Settings.from_dict({{"mypkg": {{"level": 3}}}}),
    "toml": resolve(["--config", {config!r}]),
    "flag": resolve(["--mypkg-level", "3"]),
}}
parser = argparse.ArgumentParser()
cli_settings.add_arguments(parser)
print(json.dumps({{
    "same": [name for name, s in ways.items() if s == python],
    "default": fxdeploy.Settings().mypkg.level,
    "help": "how hard my_pkg optimizes" in parser.format_help(),
}}))
model, (x,) = models.convnet()
cache = CacheSettings(enabled=True, dir={cache!r})
for level in (1, 3, 3):
    settings = fxdeploy.Settings(cache=cache).with_sections(mypkg=my_pkg.MySettings(level=level))
    deployed = fxdeploy.lower(model, (x,), target="mytarget", settings=settings)
    print(json.dumps([deployed.manifest["settings"]["mypkg"], deployed.manifest["info"]["level"],
                      sorted(k for k, v in deployed.manifest["settings"].items() if isinstance(v, dict))]))
loaded = fxdeploy.load(deployed.save({art!r}))
print(loaded.manifest["settings"]["mypkg"]["level"], fxdeploy.load({art!r}).executor is not None)
"""

ENTRIES = "from fxdeploy.cache import open_cache\nprint(len(open_cache({cache!r}).entries()))"


def test_a_plugin_setting_resolves_the_same_three_ways_and_keys_the_cache(tmp_path: Path) -> None:
    site = make_site(tmp_path, "mytarget = my_pkg:make_target")
    config = tmp_path / "fx.toml"
    config.write_text("[mypkg]\nlevel = 3\n")
    env, cache = {"PYTHONPATH": f"{site}:{ROOT}"}, str(tmp_path / "cache")
    code = RESOLVE.format(config=str(config), cache=cache, art=str(tmp_path / "art"))
    lines = run_python(code, env=env).splitlines()
    assert json.loads(lines[0]) == {"same": ["python", "dict", "toml", "flag"], "default": 1, "help": True}
    rows = [json.loads(line) for line in lines[1:4]]
    assert [row[:2] for row in rows] == [[{"level": 1}, 1], [{"level": 3}, 3], [{"level": 3}, 3]]
    assert rows[0][2] == ["cache", "capture", "mypkg", "onnx"]  # the target's own sections, none of ncnn's
    assert lines[4] == "3 True"
    count = ENTRIES.format(cache=cache)
    assert run_python(count, env=env).strip() == "2"  # level 1 and level 3; the second level 3 was a hit

    metadata = site / "my_pkg-1.0.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 1.0", "Version: 1.1"))
    run_python(code, env=env)
    assert run_python(count, env=env).strip() == "4"  # the new version built both again
