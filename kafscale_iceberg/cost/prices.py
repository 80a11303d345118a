"""AWS list prices the cost model uses: us-east-1 on-demand by default, each with the page that publishes it.

A fleet file's `prices:` section overrides any of them by name (another region, a discount), validated
here with messages naming the key. docs/cost.md lists them with their sources; a test holds the two
together.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

LAMBDA = "aws.amazon.com/lambda/pricing"
SFN = "aws.amazon.com/step-functions/pricing"
SQS = "aws.amazon.com/sqs/pricing"
S3 = "aws.amazon.com/s3/pricing"
EMR = "aws.amazon.com/emr/pricing"
CLOUDWATCH = "aws.amazon.com/cloudwatch/pricing"
XRAY = "aws.amazon.com/xray/pricing"
VPC = "aws.amazon.com/vpc/pricing"
PRIVATELINK = "aws.amazon.com/privatelink/pricing"
FIREHOSE = "aws.amazon.com/firehose/pricing"


def _price(default: float, source: str, description: str) -> float:
    """A price field: its default, the page that publishes it (docs/cost.md lists both)."""
    price: float = Field(default=default, ge=0, description=description, json_schema_extra={"source": source})
    return price


class PriceList(BaseModel):
    """USD list prices (us-east-1, checked 2026-11-27 against public material quoting the pages named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lambda_request: float = _price(0.20e-6, LAMBDA, "per request")
    lambda_gb_s_x86: float = _price(0.0000166667, LAMBDA, "per GB-second, x86_64")
    lambda_gb_s_arm: float = _price(0.0000133334, LAMBDA, "per GB-second, arm64")
    sfn_standard_transition: float = _price(0.025e-3, SFN, "per state transition (Standard)")
    sfn_express_request: float = _price(1.00e-6, SFN, "per execution (Express)")
    sfn_express_gb_s: float = _price(0.00001667, SFN, "per GB-second of an execution (Express, 64 MB)")
    sqs_standard_request: float = _price(0.40e-6, SQS, "per request (standard queue)")
    sqs_fifo_request: float = _price(0.50e-6, SQS, "per request (FIFO queue)")
    s3_put_list_request: float = _price(0.005e-3, S3, "per PUT, COPY, POST or LIST (S3 Standard)")
    s3_get_request: float = _price(0.0004e-3, S3, "per GET or other request (S3 Standard)")
    emr_vcpu_hour_arm: float = _price(0.042094, EMR, "per vCPU-hour (EMR Serverless, arm64)")
    emr_gb_hour_arm: float = _price(0.004628, EMR, "per GB-hour (EMR Serverless, arm64)")
    emr_vcpu_hour_x86: float = _price(0.052624, EMR, "per vCPU-hour (EMR Serverless, x86_64)")
    emr_gb_hour_x86: float = _price(0.0057785, EMR, "per GB-hour (EMR Serverless, x86_64)")
    cloudwatch_metric_month: float = _price(0.30, CLOUDWATCH, "per custom metric-month (first 10,000)")
    cloudwatch_alarm_month: float = _price(0.10, CLOUDWATCH, "per alarm metric-month (standard resolution)")
    cloudwatch_dashboard_month: float = _price(3.00, CLOUDWATCH, "per dashboard-month (beyond the 3 free)")
    logs_ingest_gb: float = _price(0.50, CLOUDWATCH, "per GB of logs ingested (Standard)")
    logs_storage_gb_month: float = _price(0.03, CLOUDWATCH, "per GB-month of logs archived")
    xray_trace: float = _price(5.00e-6, XRAY, "per trace recorded (beyond 100,000 a month free)")
    nat_gateway_hour: float = _price(0.045, VPC, "per NAT gateway-hour")
    nat_gb: float = _price(0.045, VPC, "per GB a NAT gateway processes")
    interface_endpoint_hour: float = _price(0.01, PRIVATELINK, "per interface endpoint-hour, per AZ")
    interface_endpoint_gb: float = _price(0.01, PRIVATELINK, "per GB an interface endpoint processes")
    firehose_iceberg_gb: float = _price(0.075, FIREHOSE, "per GB ingested (Apache Iceberg destination)")


US_EAST_1 = PriceList()
