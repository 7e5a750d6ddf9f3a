"""The connector's two secrets.

* The webhook secret, which Label Studio sends in a header of every webhook: 256 random
  bits, shown once and stored as its SHA-256 (random secrets need no slow hash, as API
  tokens), compared in constant time.
* The Label Studio API token of the pull sync: Label Studio needs the token itself, so it
  cannot be hashed. It is stored encrypted (Fernet: AES-128-CBC + HMAC-SHA256) under a key
  derived by HKDF-SHA256 from ``AUDITOR_SECRET_KEY``, or not stored at all: the connector
  then names an environment variable that the syncing process reads it from.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

__all__ = ["SECRET_HEADER", "TokenError", "configured_secret_key", "decrypt_token", "encrypt_token", "hash_secret", "new_webhook_secret",
           "secret_matches"]

SECRET_HEADER = "X-Auditor-Webhook-Secret"
_PREFIX = "lsw_"
_DUMMY_HASH = hashlib.sha256(b"no connector").hexdigest()


class TokenError(Exception):
    """The API token cannot be had (no key to decrypt it, a changed key, an unset variable)."""


def new_webhook_secret() -> str:
    return _PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(given: str | None, stored_hash: str | None) -> bool:
    """Whether ``given`` is the secret whose hash is ``stored_hash``, in constant time (the
    comparison runs, against a dummy, even when there is nothing to compare with)."""
    candidate = hash_secret(given or "")
    ok = hmac.compare_digest(candidate, stored_hash or _DUMMY_HASH)
    return bool(given) and stored_hash is not None and ok


def _fernet(secret_key: str):
    try:
        from cryptography.fernet import Fernet
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError:  # pragma: no cover - the labelstudio extra brings it
        raise TokenError("storing a Label Studio token needs the 'cryptography' package: "
                         "pip install 'auditor[labelstudio]', or keep the token in an environment variable "
                         "(--token-env)") from None
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=b"auditor label-studio api token").derive(secret_key.encode("utf-8"))
    return Fernet(base64.urlsafe_b64encode(key))


def configured_secret_key(environ=None) -> str:
    """``AUDITOR_SECRET_KEY``; without it every process would derive another key."""
    key = (os.environ if environ is None else environ).get("AUDITOR_SECRET_KEY") or ""
    if not key:
        raise TokenError("AUDITOR_SECRET_KEY is not set: the stored Label Studio token is encrypted with a key "
                         "derived from it, so every process (web, worker, command line) needs the same value; "
                         "set it, or keep the token in an environment variable (--token-env)")
    return key


def encrypt_token(token: str, secret_key: str) -> str:
    return _fernet(secret_key).encrypt(token.encode("utf-8")).decode("ascii")


def decrypt_token(ciphertext: str, secret_key: str) -> str:
    from cryptography.fernet import InvalidToken

    try:
        return _fernet(secret_key).decrypt(ciphertext.encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise TokenError("the stored Label Studio token cannot be decrypted: AUDITOR_SECRET_KEY changed since it "
                         "was stored; store it again (auditor connect label-studio ... --token)") from None
