"""An S3-protocol server for tests: moto's server on a free localhost port, with one bucket.

Not a mock of voxpipe's client: obstore, s3fs and boto3 talk HTTP to it as to S3. Used as
``server = S3Server(BUCKET)`` in a module-scoped fixture, ``server.stop()`` after.
"""
from __future__ import annotations

from typing import Any

KEYS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


class S3Server:
    """moto's ThreadedMotoServer on 127.0.0.1 with `bucket` created: ``endpoint`` (its URL),
    ``client`` (boto3, to upload and replace objects)."""

    def __init__(self, bucket: str):
        import boto3
        from moto import server as moto_server
        self.bucket = bucket
        self._server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0,
                                                      verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.client: Any = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=KEYS["access_key_id"],
            aws_secret_access_key=KEYS["secret_access_key"], region_name=KEYS["region"])
        self.client.create_bucket(Bucket=bucket)

    def storage_options(self) -> dict[str, Any]:
        """voxpipe's storage_options (obstore's keys) that reach the server."""
        return dict(KEYS, endpoint=self.endpoint, allow_http=True)

    def environment(self, **extra: str) -> dict[str, str]:
        """os.environ plus the variables that point the clouds' tools (and so obstore, and a
        voxpipe command) at the server with its keys; ``extra`` added."""
        import os
        return dict(os.environ, AWS_ENDPOINT_URL=self.endpoint, AWS_ALLOW_HTTP="true",
                    AWS_ACCESS_KEY_ID=KEYS["access_key_id"],
                    AWS_SECRET_ACCESS_KEY=KEYS["secret_access_key"],
                    AWS_DEFAULT_REGION=KEYS["region"], **extra)

    def stop(self) -> None:
        self._server.stop()
