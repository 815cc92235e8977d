"""Where the staging log's files live: `PosixStore` (a directory every node mounts) and
`S3Store` (an ``s3://`` or ``s3a://`` bucket and key prefix), picked by `open_store` from the
location's scheme. A store knows files by names relative to its root (``b3/p0.arrow``,
``unconfirmed/b3-p0.arrow``); what the names mean is `staging.StagingLog`'s business.

The one operation that matters is `claim`: create a file only if its name is free, atomically,
so that of two attempts of a task exactly one stages its rows."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from .options import local_path, s3_parts

__all__ = ["PosixStore", "S3Store", "Store", "fsync_dir", "open_store"]


class Store(Protocol):
    """The file operations the staging log needs."""

    #: The store's location, for messages.
    root: str

    def open(self, name: str) -> Any | None:
        """A pyarrow readable file of `name`, None if there is none."""

    def claim(self, name: str, write: Callable[[Any], None]) -> bool:
        """Create `name` with what `write(sink)` writes, durably; False (and nothing changed)
        if `name` exists."""

    def mark(self, name: str) -> None:
        """Create (or overwrite) the empty file `name`."""

    def listing(self) -> dict[str, set[str]]:
        """The files under the root, by directory (one level: ``{"b3": {"p0.arrow"}}``)."""

    def delete(self, names: Iterable[str]) -> None:
        """Remove `names` (those already gone are no error)."""

    def move(self, name: str, new_name: str) -> None:
        """Rename `name` to `new_name` (never leaving both names missing)."""

    def drop_dir(self, directory: str) -> None:
        """Remove `directory` if it is empty (the store may have no directories)."""


def open_store(root: str) -> Store:
    """The store of `root`: an absolute path or ``file:`` URL, or ``s3://bucket/prefix``
    (``s3a://`` is the same bucket and key, as Hadoop spells it)."""
    path = local_path(root)
    if path is not None:
        return PosixStore(path)
    bucket, prefix = s3_parts(root)
    return S3Store(root, bucket, prefix)


def fsync_dir(path: str) -> None:
    """fsync the directory `path` (a name linked, renamed or removed in it is durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PosixStore:
    """A directory the driver and every executor see as a POSIX file system. A claim writes a
    temporary file, fsyncs it, links it to its name (``link`` fails if the name exists) and
    fsyncs the directory."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def open(self, name: str) -> Any | None:
        import pyarrow as pa

        try:
            return pa.memory_map(self._path(name))
        except FileNotFoundError:
            return None

    def claim(self, name: str, write: Callable[[Any], None]) -> bool:
        final = self._path(name)
        directory = os.path.dirname(final)
        os.makedirs(directory, exist_ok=True)
        temp = f"{final}.tmp-{uuid.uuid4().hex}"
        try:
            with open(temp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temp, final)
            except FileExistsError:
                return False
            fsync_dir(directory)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def mark(self, name: str) -> None:
        with open(self._path(name), "wb"):
            pass

    def listing(self) -> dict[str, set[str]]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return {}
        tree: dict[str, set[str]] = {}
        for name in names:
            try:
                tree[name] = set(os.listdir(self._path(name)))
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed by a commit meanwhile, or a stray file
        return tree

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(name))

    def move(self, name: str, new_name: str) -> None:
        target = self._path(new_name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(self._path(name), target)

    def drop_dir(self, directory: str) -> None:
        with contextlib.suppress(OSError):
            os.rmdir(self._path(directory))


#: One boto3 session per process (a client from it costs ~10 ms, a new session ~150 ms); a
#: botocore session is not thread-safe, so clients are made under the lock.
_session: Any = None
_session_lock = threading.Lock()

#: A claim answered 409 (another conditional write of the key in progress) is tried again.
_CONFLICT_RETRIES = 5
#: Keys per ListObjectsV2 page, and per DeleteObjects request (S3's most for both).
_PAGE = 1000


def _s3_client() -> Any:
    global _session
    try:
        import boto3
    except ImportError:
        raise ImportError(
            "an s3:// stagingLocation needs boto3 on the driver and every executor: "
            "pip install 'trionsq[spark-s3]'"
        ) from None
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        # Endpoint (AWS_ENDPOINT_URL[_S3]), credentials and region: boto3's standard chain.
        return _session.client("s3")


def _error_code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Store:
    """A bucket and key prefix on S3 or a compatible store, through boto3. A claim is one
    ``PutObject`` with ``If-None-Match: *`` (S3 answers 412 if the key exists): a conditional
    write, which pyarrow.fs.S3FileSystem cannot do (its writes always overwrite), hence boto3.
    S3 has no rename: a move is a copy, then a delete."""

    def __init__(self, root: str, bucket: str, prefix: str) -> None:
        self.root = root
        self.bucket = bucket
        self.prefix = prefix
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _s3_client()
        return self._client

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def open(self, name: str) -> Any | None:
        import pyarrow as pa
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(name))
        except ClientError as exc:
            if _error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise
        with contextlib.closing(response["Body"]) as body:
            return pa.BufferReader(body.read())

    def claim(self, name: str, write: Callable[[Any], None]) -> bool:
        import pyarrow as pa
        from botocore.exceptions import ClientError

        sink = pa.BufferOutputStream()
        write(sink)
        body = sink.getvalue().to_pybytes()
        key = self._key(name)
        # Identifies this claim's object: a 412 may answer botocore's retry of our own PUT
        # whose first response was lost (a timeout), and then the key is ours.
        token = uuid.uuid4().hex
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=body,
                    IfNoneMatch="*",
                    Metadata={"trionsq-claim": token},
                )
                return True
            except ClientError as exc:
                code = _error_code(exc)
                if code == "PreconditionFailed":
                    return self._claimed_by(key) == token
                # 409: a concurrent conditional write of the key had not finished; once it
                # has, the next attempt is answered 412 (or succeeds if that write failed).
                if code != "ConditionalRequestConflict" or attempt == _CONFLICT_RETRIES:
                    raise
            time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _claimed_by(self, key: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in ("NoSuchKey", "404"):
                return None  # claimed by another attempt, and committed meanwhile
            raise
        return head.get("Metadata", {}).get("trionsq-claim")  # type: ignore[no-any-return]

    def mark(self, name: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=b"")

    def listing(self) -> dict[str, set[str]]:
        base = self._key("")
        tree: dict[str, set[str]] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base, PaginationConfig={"PageSize": _PAGE}
        )
        for page in pages:
            for item in page.get("Contents", []):
                directory, _, name = item["Key"][len(base) :].partition("/")
                if name and "/" not in name:
                    tree.setdefault(directory, set()).add(name)
        return tree

    def delete(self, names: Iterable[str]) -> None:
        keys = [{"Key": self._key(name)} for name in names]
        for i in range(0, len(keys), _PAGE):
            response = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": keys[i : i + _PAGE], "Quiet": True}
            )
            errors = response.get("Errors") or []
            if errors:
                raise OSError(f"{self.root}: could not delete {errors[0]}")

    def move(self, name: str, new_name: str) -> None:
        source = {"Bucket": self.bucket, "Key": self._key(name)}
        self.client.copy_object(Bucket=self.bucket, Key=self._key(new_name), CopySource=source)
        self.client.delete_object(Bucket=self.bucket, Key=self._key(name))

    def drop_dir(self, directory: str) -> None:
        pass  # no directories in a bucket
