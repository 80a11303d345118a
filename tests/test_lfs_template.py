"""template.yaml: the roles that run a plan's tasks (the EMR job, the Lambda runner) may read LFS blobs where
the config says they are, and nowhere else."""

from __future__ import annotations

from tests.support.cfn_template import Deployment, s3_object_arn
from tests.test_template import INSTALLATIONS, ROLES

BLOB = "images/lfs/2026/11/20/obj-00000000-0000-0000-0000-000000000001"


def test_blobs_in_the_segment_bucket_need_no_extra_grant() -> None:
    deployment = Deployment(INSTALLATIONS["existing-bucket"])
    assert deployment.role_allows(
        "EmrJobRole", "s3:GetObject", s3_object_arn(f"s3://kafscale-data/production/{BLOB}")
    )
    assert not deployment.role_allows(
        "EmrJobRole", "s3:GetObject", s3_object_arn(f"s3://kafscale-lfs/{BLOB}")
    )


TASK_ROLES = ("EmrJobRole", "PlanRunnerRole")


def test_listed_blob_buckets_are_readable_by_the_task_runners_only() -> None:
    deployment = Deployment(
        {**INSTALLATIONS["existing-bucket"], "LfsBlobBuckets": "kafscale-lfs,media-blobs"}
    )
    for bucket in ("kafscale-lfs", "media-blobs"):
        arn = s3_object_arn(f"s3://{bucket}/production/{BLOB}")
        for role in TASK_ROLES:
            assert deployment.role_allows(role, "s3:GetObject", arn)
            assert deployment.role_allows(role, "s3:ListBucket", f"arn:aws:s3:::{bucket}")
            assert not deployment.role_allows(role, "s3:PutObject", arn)
        assert [
            r for r in ROLES if r not in TASK_ROLES and deployment.role_allows(r, "s3:GetObject", arn)
        ] == []
    for role in TASK_ROLES:
        assert not deployment.role_allows(role, "s3:GetObject", s3_object_arn("s3://somebody-elses/x"))
