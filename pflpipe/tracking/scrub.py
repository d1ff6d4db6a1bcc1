"""Keep credentials out of the tracking store.

Every parameter, tag, run name and text artifact passes through here before it reaches MLflow.
A value is redacted when its key names a credential (``*secret*``, ``*password*``, ``*token*``,
...), when it contains the value of a credential environment variable (AWS_SECRET_ACCESS_KEY,
MLFLOW_TRACKING_PASSWORD, ... and any variable whose name looks like one), when it holds an AWS
access key id, or — for the password part only — when it is a URL with ``user:password@``.
The environment itself is never logged.
"""

import logging
import os
import re
from typing import Any

log = logging.getLogger(__name__)

REDACTED = "***"

#: Variables always treated as credentials, whatever their value looks like.
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
    "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_CONNECTION_STRING", "MINIO_ROOT_PASSWORD",
    "MINIO_SECRET_KEY", "HF_TOKEN", "DATABRICKS_TOKEN", "KFP_BEARER_TOKEN",
)
_CREDENTIAL_NAME = re.compile(
    r"secret|passw|token|credential|access_?key|api_?key|private_?key", re.IGNORECASE)
#: Keys that only *name* a credential's location, never hold one (a Kubernetes secret's name).
_HARMLESS_NAME = re.compile(r"(^|[._])secret_name$|(^|[._])max_tokens$|(^|[._])secret_keys\.",
                            re.IGNORECASE)
_AWS_KEY_ID = re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+):[^/\s@]+@")
_MIN_SECRET_LENGTH = 8  # shorter environment values ("1", "true") would redact everything


def is_credential_key(key: str) -> bool:
    """Whether a parameter or tag key names a credential.

    >>> is_credential_key("storage.aws_secret_access_key"), is_credential_key("storage.secret_name")
    (True, False)
    >>> is_credential_key("storage.secret_keys.secret_access_key")  # the name of a secret's key
    False
    """
    return bool(_CREDENTIAL_NAME.search(key)) and not _HARMLESS_NAME.search(key)


def credential_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of the credential environment variables set now (longest first)."""
    environ = os.environ if environ is None else environ
    values = {value for name, value in environ.items()
              if (name in CREDENTIAL_ENV or is_credential_key(name))
              and len(value) >= _MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def scrub_text(text: str, secrets: list[str] | None = None) -> str:
    """Return `text` with every credential value, access key id and URL password replaced.

    >>> scrub_text("uri: https://alice:hunter2@mlflow.example/", secrets=[])
    'uri: https://alice:***@mlflow.example/'
    """
    for secret in credential_values() if secrets is None else secrets:
        text = text.replace(secret, REDACTED)
    text = _AWS_KEY_ID.sub(REDACTED, text)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}:{REDACTED}@", text)


def scrub_mapping(values: dict[str, Any], what: str = "parameter") -> dict[str, str]:
    """Stringify values and redact credentials; keys naming a credential get ``***``."""
    secrets = credential_values()
    clean = {}
    for key, value in values.items():
        text = "" if value is None else str(value)
        if is_credential_key(str(key)) and text:
            log.warning("%s %r looks like a credential; its value is not logged", what, key)
            clean[str(key)] = REDACTED
            continue
        scrubbed = scrub_text(text, secrets)
        if scrubbed != text:
            log.warning("%s %r held a credential; it was redacted", what, key)
        clean[str(key)] = scrubbed
    return clean


def find_secret(data: bytes, secrets: list[str] | None = None) -> str | None:
    """Name the environment variable whose value `data` contains, or None."""
    secrets = credential_values() if secrets is None else secrets
    for secret in secrets:
        if secret.encode() in data:
            return next((name for name, value in os.environ.items() if value == secret),
                        "a credential variable")
    return None
