"""The chart's NOTES, held to what they describe: the gang they suggest (its names, its size,
its topology level) is admitted by the webhook under the configuration the same values
render, for every ``topology.preset``, and every ``kubectl troupe`` command they suggest is
one the plugin takes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from devtools.devcluster.build import built_helm
from reconciler.tools.plugin import parser
from tests.support.helm import CHART, NOT_BUILT, RELEASE, notes, one, render
from tests.support.webhook_builders import make_pod, make_review
from troupe.config import Config, load_config
from troupe.layers import TOPOLOGY_PREFERRED_LEVEL, TOPOLOGY_REQUIRED_LEVEL
from webhook.admission import mutate, outcome_of

pytestmark = pytest.mark.skipif(built_helm() is None, reason=NOT_BUILT)

#: Every value of ``topology.preset`` the schema takes (values.schema.json).
PRESETS: list[str] = json.loads((CHART / "values.schema.json").read_text())["properties"]["topology"][
    "properties"]["preset"]["enum"]
#: A kubeadm cluster's own labels (docs/guide/platforms.md): ``custom`` with levels of its own.
OWN_LEVELS = ("--set", "topology.preset=custom", "--set-json", 'config.topologyLevels=["example.com/rack","example.com/host"]',
              "--set-json", "config.topologyFallbackLevels=[]")
CASES = {preset: ("--set", f"topology.preset={preset}") for preset in PRESETS} | {"custom, own levels": OWN_LEVELS}


def rendered_config(values: tuple[str, ...], tmp_path: Path) -> Config:
    """The configuration the chart renders with ``values``, as the webhook loads it."""
    path = tmp_path / "config.yaml"
    path.write_text(one(render(*values), "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])
    return load_config(str(path))


def suggested_annotations(text: str) -> dict[str, str]:
    """The ``annotations:`` block of the NOTES' example pod template, each value as YAML reads it."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "annotations:")
    indent = len(lines[at]) - len(lines[at].lstrip())
    block = []
    for line in lines[at + 1:]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
    annotations = yaml.safe_load("\n".join(block))
    assert isinstance(annotations, dict) and annotations, f"no annotations under line {at + 1}"
    return {str(k): str(v) for k, v in annotations.items()}


@pytest.mark.parametrize("case", CASES)
def test_the_notes_suggest_a_gang_the_webhook_admits_under_the_presets_levels(case: str, tmp_path: Path) -> None:
    values = CASES[case]
    config, text = rendered_config(values, tmp_path), notes(*values)
    annotations = suggested_annotations(text)
    levels = {k: v for k, v in annotations.items() if k in (TOPOLOGY_REQUIRED_LEVEL, TOPOLOGY_PREFERRED_LEVEL)}
    assert levels, f"the NOTES suggest no topology level: {annotations}"
    assert {k: v for k, v in levels.items() if config.level_depth(v) is None} == {}, config.all_levels
    named = set(re.findall(r"[a-z0-9.-]+\.[a-z]+/[a-z0-9.-]+", text.partition("# optional")[2].splitlines()[0]))
    assert named <= set(config.all_levels), f"levels named that the configuration lacks: {named - set(config.all_levels)}"

    pod = make_pod(namespace="ml").container()
    for key, value in annotations.items():
        pod.annotate(key, value)
    answer = mutate(make_review(pod.obj()), config)

    assert outcome_of(answer) == "patched", answer["response"].get("status")


@pytest.mark.parametrize("case", CASES)
def test_every_kubectl_troupe_command_of_the_notes_is_one_the_plugin_takes(case: str) -> None:
    text = notes(*CASES[case])
    assert "once the kubectl plugin exists" not in text
    commands = [shlex.split(line.split("(")[0]) for line in text.splitlines() if line.strip().startswith("kubectl troupe ")]
    assert commands, "the NOTES suggest no kubectl troupe command"
    for words in commands:
        parser().parse_args(words[2:])
