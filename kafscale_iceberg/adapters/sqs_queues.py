"""SQS with boto3: the FIFO work queue, and receiving from a queue (the one-machine loop)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from kafscale_iceberg.domain.events import TopicSignal, WorkItem, message_group_id
from kafscale_iceberg.exceptions import QueueUnavailableError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

_SQS_BATCH = 10


@dataclass(frozen=True)
class ReceivedMessage:
    """A message taken from a queue, to be deleted once handled."""

    message_id: str
    body: str
    receipt_handle: str


class SqsWorkQueue:
    """The FIFO work queue: group = topic, deduplication id = segment key (+ replay nonce)."""

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._sqs = client
        self.queue_url = queue_url

    def send_work_items(self, items: Sequence[WorkItem]) -> None:
        """Enqueue `items` in batches of 10. Idempotent within SQS's 5-minute deduplication window."""
        self._send(items)

    def signal(self, topic: str, reason: str) -> None:
        """Enqueue a topic signal ("look at this topic again"); each signal is unique (a new nonce)."""
        self._send([TopicSignal(topic=topic, reason=reason, nonce=uuid.uuid4().hex)])

    def send_signal(self, signal: TopicSignal) -> None:
        """Enqueue `signal` as built (its nonce: a retried send within 5 minutes is one message)."""
        self._send([signal])

    def _send(self, messages: Sequence[WorkItem | TopicSignal]) -> None:
        for start in range(0, len(messages), _SQS_BATCH):
            chunk = messages[start : start + _SQS_BATCH]
            entries: list[SendMessageBatchRequestEntryTypeDef] = [
                {
                    "Id": str(position),
                    "MessageBody": message.model_dump_json(),
                    "MessageGroupId": message_group_id(message.topic),
                    "MessageDeduplicationId": message.deduplication_id,
                }
                for position, message in enumerate(chunk)
            ]
            try:
                response = self._sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                raise QueueUnavailableError(f"{self.queue_url}: sending work items failed: {exc}") from exc
            failed = response.get("Failed", [])
            if failed:
                reasons = "; ".join(
                    f"{chunk[int(f['Id'])].deduplication_id}: {f.get('Message', f['Code'])}" for f in failed
                )
                raise QueueUnavailableError(f"{self.queue_url}: {len(failed)} messages not sent: {reasons}")


class SqsReceiver:
    """Long-polls a queue for messages and deletes them once handled (the one-machine loop)."""

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._sqs = client
        self.queue_url = queue_url

    def receive(self, *, wait_seconds: int = 1, max_messages: int = 10) -> list[ReceivedMessage]:
        """Up to `max_messages` messages, waiting at most `wait_seconds` for the first."""
        try:
            response = self._sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_seconds
            )
        except (ClientError, BotoCoreError) as exc:
            raise QueueUnavailableError(f"{self.queue_url}: receive failed: {exc}") from exc
        return [
            ReceivedMessage(m["MessageId"], m["Body"], m["ReceiptHandle"])
            for m in response.get("Messages", [])
        ]

    def delete(self, message: ReceivedMessage) -> None:
        """Acknowledge a handled message. Idempotent."""
        try:
            self._sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message.receipt_handle)
        except (ClientError, BotoCoreError) as exc:
            raise QueueUnavailableError(f"{self.queue_url}: delete failed: {exc}") from exc


class SqsDeadLetterQueue:
    """A dead-letter queue the services write rejected messages to, with the reason attached.

    SQS's redrive moves a message only after `maxReceiveCount` failed receives and loses the reason;
    a message that can never succeed (malformed, a segment without `END!`) is sent here at once.
    """

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._sqs = client
        self.queue_url = queue_url

    def reject(self, body: str, *, message_id: str, reason: str) -> None:
        """Park `body` with `reason` (truncated to SQS's attribute limit). Not idempotent: at-least-once."""
        try:
            self._sqs.send_message(
                QueueUrl=self.queue_url,
                MessageBody=body,
                MessageAttributes={
                    "reason": {"DataType": "String", "StringValue": reason[:4000]},
                    "source_message_id": {"DataType": "String", "StringValue": message_id},
                },
            )
        except (ClientError, BotoCoreError) as exc:
            raise QueueUnavailableError(f"{self.queue_url}: rejecting {message_id} failed: {exc}") from exc


def queue_url_from_arn(arn: str) -> str:
    """The URL of the queue `arn:aws:sqs:<region>:<account>:<name>` (what an event source record names)."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    partition, region, account, name = parts[1], parts[3], parts[4], parts[5]
    suffix = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    return f"https://sqs.{region}.{suffix}/{account}/{name}"


class SqsRedelivery:
    """Makes a received message visible again sooner than its queue's visibility timeout."""

    def __init__(self, client: SQSClient) -> None:
        self._sqs = client

    def redeliver_after(self, queue_arn: str, receipt_handle: str, seconds: int) -> None:
        """`ChangeMessageVisibility` of the message to `seconds` (0-43200): SQS delivers it again then."""
        url = queue_url_from_arn(queue_arn)
        try:
            self._sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(seconds, 43_200))
            )
        except (ClientError, BotoCoreError) as exc:
            raise QueueUnavailableError(f"{url}: changing a message's visibility failed: {exc}") from exc
