"""Signed promotions: the registry signs every kernel.promoted / kernel.demoted with its Ed25519 key;
engines and serving-side adapters act only on messages whose signature verifies against the
registry's public key and, for a promotion, whose source hashes to its candidate id.

What is signed is a canonical byte string of the fields that decide what gets installed where: the
action, candidate id, slot, model, hardware, the SHA-256 of the source, and the time of the decision
(so an altered replay fails). The private key lives only in the registry's data dir (mode 0600); the
public key is a small base64 file anyone may read, or `POLYMORPH_REGISTRY_PUBLIC_KEY`.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.slot_specs import candidate_id as content_id

PRIVATE_FILE, PUBLIC_FILE = "registry-signing.key", "registry-signing.pub"
KernelEvent = ev.KernelPromoted | ev.KernelDemoted


class SignatureError(ValueError):
    """A promotion or demotion that must not be acted on (the reason says why)."""


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def signed_bytes(msg: KernelEvent) -> bytes:
    if isinstance(msg, ev.KernelPromoted):
        fields = ["kernel.promoted", msg.candidate_id, msg.slot, msg.model, msg.hardware,
                  hashlib.sha256(msg.source.encode()).hexdigest(), msg.replaces_id, f"{msg.promoted_unix:.6f}"]
    else:
        fields = ["kernel.demoted", msg.candidate_id, msg.slot, msg.model, msg.hardware, msg.reason,
                  f"{msg.demoted_unix:.6f}"]
    return "\n".join(fields).encode()


class Signer:
    def __init__(self, private: Ed25519PrivateKey) -> None:
        self.private = private
        self.key_id = key_id(private.public_key())

    @classmethod
    def load_or_create(cls, directory: Path) -> Signer:
        """The registry's key pair: created once (private key 0600), the public key next to it."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / PRIVATE_FILE
        if path.exists():
            loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(loaded, Ed25519PrivateKey):
                raise SignatureError(f"{path} is not an Ed25519 key")
            private = loaded
        else:
            private = Ed25519PrivateKey.generate()
            pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
        signer = cls(private)
        public, text = directory / PUBLIC_FILE, encode_public(private.public_key()) + "\n"
        if not public.exists() or public.read_text() != text:  # a key pair given read-only (compose secrets)
            public.write_text(text)
        return signer

    def sign(self, msg: KernelEvent) -> None:
        msg.key_id = self.key_id
        msg.signature = self.private.sign(signed_bytes(msg))


def encode_public(public: Ed25519PublicKey) -> str:
    return base64.b64encode(public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).decode()


def decode_public(text: str) -> Ed25519PublicKey:
    try:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(text.strip(), validate=True))
    except ValueError as exc:
        raise SignatureError(f"not a base64 Ed25519 public key: {exc}") from exc


def verify(msg: KernelEvent, public: Ed25519PublicKey) -> None:
    """Raises SignatureError unless the registry's key signed exactly this (and, for a promotion, the
    source is the candidate's own)."""
    if not msg.signature:
        raise SignatureError(f"{type(msg).__name__} for {msg.candidate_id} is not signed")
    if msg.key_id != key_id(public):
        raise SignatureError(f"signed by key {msg.key_id or '?'}, not the registry's ({key_id(public)})")
    try:
        public.verify(msg.signature, signed_bytes(msg))
    except InvalidSignature as exc:
        raise SignatureError(f"bad signature on {type(msg).__name__} for {msg.candidate_id}") from exc
    if isinstance(msg, ev.KernelPromoted) and content_id(msg.slot, msg.source) != msg.candidate_id:
        raise SignatureError(f"promoted source does not hash to candidate id {msg.candidate_id}")
