"""The run state machine definition (infra/): well-formed, closed, and wired to handlers that exist."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

ASL = Path(__file__).resolve().parent.parent / "infra" / "state_machine.asl.json"
HANDLERS = {
    "StartJobFunctionArn": "functions.steps.start_job",
    "PlanRunnerFunctionArn": "functions.plan_runner.handler",
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


def _machines(definition: dict[str, Any]) -> list[dict[str, Any]]:
    """The definition and each Parallel branch in it (each a closed state machine of its own)."""
    found = [definition]
    for state in definition["States"].values():
        for branch in state.get("Branches", []):
            found += _machines(branch)
    return found


def _all_states(definition: dict[str, Any]) -> dict[str, Any]:
    return {name: state for machine in _machines(definition) for name, state in machine["States"].items()}


def test_every_transition_names_a_state_and_every_state_is_reachable() -> None:
    machines = _machines(_definition())
    assert len(machines) == 3  # the run, and RunJob's two branches (the job; the lease renewal)
    for definition in machines:
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
    names = [name for machine in machines for name in machine["States"]]
    assert len(names) == len(set(names)), "state names are unique across branches"


def test_every_path_ends() -> None:
    for name, state in _all_states(_definition()).items():
        assert state.get("End") or _targets(state) or state["Type"] in {"Fail", "Succeed"}, name


def test_the_job_branch_ends_the_parallel_as_soon_as_the_job_does() -> None:
    """Both branches of RunJob end by failing (a Parallel waits for all its branches otherwise): the
    job branch with JobSucceeded, caught into Commit, so the renewal branch's wait never delays it."""
    run_job = _definition()["States"]["RunJob"]
    job, renewal = run_job["Branches"]
    assert job["States"]["WaitOnJob"]["Resource"] == "arn:aws:states:::emr-serverless:startJobRun.sync"
    assert job["States"][job["States"]["WaitOnJob"]["Next"]] == {
        "Type": "Fail",
        "Error": "JobSucceeded",
        "Cause": "the job succeeded: leave the lease renewal and commit",
    }
    for branch in (job, renewal):
        assert not any(state.get("End") for state in branch["States"].values())
        assert not any(state["Type"] == "Succeed" for state in branch["States"].values())
    assert run_job["Catch"][0] == {
        "ErrorEquals": ["JobSucceeded"],
        "ResultPath": "$.job_outcome",
        "Next": "Commit",
    }


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
    for name, state in _all_states(_definition()).items():
        if state.get("Resource") != "arn:aws:states:::lambda:invoke":
            continue
        retried = {e for retry in state["Retry"] for e in retry["ErrorEquals"]}
        if name == "Abort":
            assert retried == {"States.ALL"}
        elif name == "RunInLambda":
            # A runner killed (timeout, out of memory) or cut off is not run again: the run aborts.
            killed = {"Sandbox.Timedout", "Lambda.ClientExecutionTimeoutException"}
            assert retried == {"TransientError", *(lambdas - killed)}, name
        else:
            assert retried == {"TransientError", *lambdas}, name


def test_the_ticket_s_runner_picks_the_lambda_runner_or_the_emr_job_under_one_lease_renewal() -> None:
    """The launcher's choice (`RunTicket.runner`) is the branch: `lambda` invokes the runner function,
    anything else (an EMR run, a ticket from before the choice) waits on the EMR job; both run in
    RunJob's first branch, beside the same lease renewal, and end the same way (JobSucceeded, or a
    failure caught into the abort step)."""
    from kafscale_iceberg.domain.runner_choice import RunnerKind
    from tests.support.cfn_template import functions

    run_job = _definition()["States"]["RunJob"]
    job, _renewal = run_job["Branches"]
    choice = job["States"][job["StartAt"]]
    assert choice["Type"] == "Choice"
    assert choice["Choices"] == [
        {"Variable": "$.ticket.runner", "StringEquals": RunnerKind.LAMBDA.value, "Next": "RunInLambda"}
    ]
    assert choice["Default"] == "WaitOnJob"
    runner = job["States"]["RunInLambda"]
    assert runner["Parameters"] == {
        "FunctionName": "${PlanRunnerFunctionArn}",
        "Payload": {"ticket.$": "$.ticket"},
    }
    assert runner["Next"] == job["States"]["WaitOnJob"]["Next"] == "JobSucceeded"
    assert (
        "Catch" not in runner
    )  # a failed, timed-out or killed runner fails the branch: RunJob's Catch aborts
    (function,) = [f for f in functions() if f.logical_id == "PlanRunnerFunction"]
    assert runner["TimeoutSeconds"] > int(function.properties["Timeout"])


@pytest.mark.slow
def test_asl_validator_accepts_the_definition_as_deployed(tmp_path: Path) -> None:
    """asl-validator (npm, `make tool-node`) on the file and on the definition CloudFormation hands to
    Step Functions (the template's substitutions applied), ARNs and paths checked."""
    import shutil
    import subprocess

    from tests.support.aws_box import substituted_definition
    from tests.support.cfn_template import Deployment
    from tests.test_template import INSTALLATIONS

    root = ASL.parent.parent
    validator = root / ".tools-node" / "node_modules" / ".bin" / "asl-validator"
    if shutil.which("npm") is None:
        pytest.skip("no npm on PATH: cannot install asl-validator (make tool-node)")
    made = subprocess.run(
        ["make", "--no-print-directory", "tool-node"],
        cwd=root,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert validator.exists()
    deployed = tmp_path / "deployed.asl.json"
    deployed.write_text(substituted_definition(Deployment(INSTALLATIONS["existing-bucket"])))
    for path in (ASL, deployed):
        checked = subprocess.run(
            [str(validator), "--json-path", str(path)], check=False, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    broken = tmp_path / "broken.asl.json"
    definition = _definition()
    definition["States"]["RunJob"]["Branches"][0]["States"]["WaitOnJob"]["Next"] = "Nowhere"
    broken.write_text(json.dumps(definition))
    refused = subprocess.run(
        [str(validator), "--json-path", str(broken)], check=False, capture_output=True, text=True
    )
    assert refused.returncode != 0  # the validator does check what it is given
