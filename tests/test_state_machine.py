"""The run state machine definition (infra/): well-formed, closed, and wired to handlers that exist."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

ASL = Path(__file__).resolve().parent.parent / "infra" / "state_machine.asl.json"
HANDLERS = {
    "StartJobFunctionArn": "functions.steps.start_job",
    "WatchFunctionArn": "functions.steps.watch",
    "CommitFunctionArn": "functions.commit.handler",
    "AbortFunctionArn": "functions.steps.abort",
}


def _definition() -> dict[str, Any]:
    return dict(json.loads(ASL.read_text()))


def _targets(state: dict[str, Any]) -> list[str]:
    targets = [state.get("Next"), state.get("Default")]
    targets += [c.get("Next") for c in state.get("Choices", [])]
    targets += [c.get("Next") for c in state.get("Catch", [])]
    return [t for t in targets if t]


def test_every_transition_names_a_state_and_every_state_is_reachable() -> None:
    definition = _definition()
    states = definition["States"]
    reachable = {definition["StartAt"]}
    frontier = [definition["StartAt"]]
    while frontier:
        for target in _targets(states[frontier.pop()]):
            assert target in states, f"unknown state {target}"
            if target not in reachable:
                reachable.add(target)
                frontier.append(target)
    assert reachable == set(states)


def test_every_path_ends() -> None:
    states = _definition()["States"]
    for name, state in states.items():
        assert state.get("End") or _targets(state) or state["Type"] in {"Fail", "Succeed"}, name


def test_substitutions_are_the_known_ones_and_name_importable_handlers() -> None:
    names = set(re.findall(r"\$\{(\w+)\}", ASL.read_text()))
    assert names == {*HANDLERS, "WorkQueueUrl"}
    for dotted in HANDLERS.values():
        module, function = dotted.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), function))


def test_retried_error_names_are_the_surfaced_name_or_lambdas_own() -> None:
    """A `Retry` matches the exact `errorType` Lambda reports; the steps surface one name for every
    transient failure (tests/test_serverless_fixes.py checks each transient class reaches it)."""
    lambdas = {
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.ClientExecutionTimeoutException",
        "Lambda.TooManyRequestsException",
        "Sandbox.Timedout",
    }
    for name, state in _definition()["States"].items():
        if state.get("Resource") != "arn:aws:states:::lambda:invoke":
            continue
        retried = {e for retry in state["Retry"] for e in retry["ErrorEquals"]}
        if name == "Abort":
            assert retried == {"States.ALL"}
        else:
            assert retried == {"TransientError", *lambdas}, name
