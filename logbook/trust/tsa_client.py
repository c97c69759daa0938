"""Speaking RFC 3161 to a timestamp authority, and checking its tokens offline, through `rfc3161-client`.

A stamp proves that a record with a given SHA-256 existed by the authority's
time. The token's message imprint is the record's own hash (the 32 bytes a
record's `sha256` names), so anyone can check a stamp with standard tools,
e.g. `openssl ts -verify -digest <hash> -in <stamp>.tsr -CAfile <ca.pem>`.

`rfc3161-client` builds requests from the data to hash, never from a digest:
the request for a placeholder is built by the library, and the 32 bytes of
its imprint are swapped for the record's hash (same length, same place), then
the request is parsed back to prove it says what was meant. Nothing here
encodes ASN.1 by hand.

The request asks for the TSA's certificate (`certReq`), so a token carries its
signer and verifies with nothing but the configured CA; the CA file may hold
intermediates beside the root (every self-signed certificate in it is a root).
"""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_PLACEHOLDER = b"logbook: the imprint of this request is replaced by a record's sha256"


class TsaUnavailable(Exception):
    """The authority could not be reached, or did not answer with a token, within the timeout."""


class StampInvalid(Exception):
    """A token that does not prove what it should; `proof` names the check that failed."""

    def __init__(self, proof: str, detail: str) -> None:
        super().__init__(f"{proof}: {detail}")
        self.proof = proof
        """signature | chain | imprint | format | status"""
        self.detail = detail


@dataclass(frozen=True)
class TrustAnchors:
    """The certificates one authority's tokens are checked against."""

    roots: tuple
    """Self-signed certificates (cryptography.x509.Certificate)."""
    intermediates: tuple
    """Any other certificate in the CA file."""
    signers: tuple = ()
    """Those of them that may stamp (critical timeStamping EKU): the authority's own certificate, for tokens
    that carry none (see `request_token`)."""


def load_anchors(pem: bytes, where: str) -> TrustAnchors:
    """The certificates of a PEM file; ValueError naming `where` when it holds none or no root."""
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise ValueError(f"{where} holds no readable PEM certificate ({e})") from None
    roots = tuple(c for c in certs if c.issuer == c.subject)
    if not roots:
        raise ValueError(f"{where} holds no self-signed (root) certificate")
    others = tuple(c for c in certs if c.issuer != c.subject)
    return TrustAnchors(roots, others, tuple(c for c in others if _may_stamp(c)))


def _may_stamp(cert) -> bool:
    from cryptography import x509

    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    except x509.ExtensionNotFound:
        return False
    return eku.critical and x509.ExtendedKeyUsageOID.TIME_STAMPING in eku.value


def build_request(digest: bytes, cert_req: bool = True):
    """A TimeStampRequest (SHA-256, a nonce, certReq unless told) whose imprint is `digest`."""
    from rfc3161_client import HashAlgorithm, TimestampRequestBuilder
    from rfc3161_client import _rust

    if len(digest) != 32:
        raise ValueError("a stamp is asked for a 32-byte SHA-256 digest")
    req = (TimestampRequestBuilder().data(_PLACEHOLDER).hash_algorithm(HashAlgorithm.SHA256)
           .cert_request(cert_request=cert_req).build())
    der, imprint = req.as_bytes(), hashlib.sha256(_PLACEHOLDER).digest()
    if der.count(imprint) != 1:  # never: 32 bytes of a hash do not occur by chance elsewhere in 80
        raise RuntimeError("the placeholder's imprint is not where a request keeps it")
    swapped = _rust.parse_timestamp_request(der.replace(imprint, digest))
    if swapped.message_imprint.message != digest or swapped.nonce != req.nonce:
        raise RuntimeError("the request does not carry the record's hash as its imprint")
    return swapped


def request_token(url: str, digest: bytes, anchors: TrustAnchors, timeout_s: float) -> tuple[bytes, datetime]:
    """Ask `url` for a stamp of `digest`: the TimeStampResp's DER bytes, checked against this request, and its time.

    Raises TsaUnavailable for anything the network or the authority did
    (unreachable, slow, an HTTP error, a refusal), StampInvalid when the answer
    does not verify (a wrong nonce, imprint or signer is not a stamp of ours).
    Some authorities embed their chain as an unsorted SET, which strict DER
    refuses (`InvalidSetOrdering`); where the CA file also holds the
    authority's own certificate, such an authority is asked again without
    certReq and its token checked against that certificate.
    """
    deadline = time.monotonic() + timeout_s
    try:
        return _ask(url, digest, anchors, timeout_s, cert_req=True)
    except StampInvalid as e:
        if "InvalidSetOrdering" not in e.detail:
            raise
        if not anchors.signers:
            raise StampInvalid("format", "its token embeds a certificate chain in an order strict DER refuses: add "
                                         "the authority's own certificate to its ca file, and it is asked for "
                                         "tokens without one") from None
        return _ask(url, digest, anchors, max(0.001, deadline - time.monotonic()), cert_req=False)


def _ask(url: str, digest: bytes, anchors: TrustAnchors, timeout_s: float, *, cert_req: bool) -> tuple[bytes, datetime]:
    req = build_request(digest, cert_req)
    http = urllib.request.Request(url, data=req.as_bytes(), method="POST",
                                  headers={"Content-Type": "application/timestamp-query",
                                           "Accept": "application/timestamp-reply"})
    try:
        with urllib.request.urlopen(http, timeout=timeout_s) as resp:
            body = resp.read(1 << 20)  # a token is a few KB; a megabyte is not a token
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise TsaUnavailable(f"{url}: {reason}") from None
    try:
        return body, check_token(body, digest, anchors, nonce=req.nonce)
    except StampInvalid as e:
        if e.proof == "status" or (e.proof == "format" and "InvalidSetOrdering" not in e.detail):
            # a refusal or an error page: the authority gave no stamp this time
            raise TsaUnavailable(f"{url}: {e}") from None
        raise


def check_token(tsr: bytes, digest: bytes, anchors: TrustAnchors, *, nonce: int | None = None) -> datetime:
    """Verify a stored TimeStampResp offline: granted, signed by a certificate that chains to `anchors`
    and may stamp (critical timeStamping EKU), over exactly `digest`. Returns its time (UTC)."""
    from rfc3161_client import PKIStatus, VerificationError, decode_timestamp_response

    try:
        resp = decode_timestamp_response(tsr)
    except Exception as e:  # the Rust parser raises its own types for malformed DER
        raise StampInvalid("format", f"not an RFC 3161 response ({type(e).__name__}: {e})") from None
    if resp.status != PKIStatus.GRANTED:  # what the library's verifier accepts
        raise StampInvalid("status", f"the authority refused: status {resp.status} "
                                     f"{' '.join(resp.status_string)}".rstrip())
    if resp.tst_info.message_imprint.message != digest:
        # Checked first and by itself: a stamp of another record is the commonest mistake, and says so.
        raise StampInvalid("imprint", f"it stamps {resp.tst_info.message_imprint.message.hex()[:12]}…, "
                                      f"not {digest.hex()[:12]}…")
    try:
        _verify(resp, digest, anchors, nonce)
    except VerificationError as e:
        text = str(e)
        proof = "chain" if "issuer certificate" in text or "certificate verify" in text else "signature"
        raise StampInvalid(proof, _short(text)) from None
    return resp.tst_info.gen_time


def _verify(resp, digest: bytes, anchors: TrustAnchors, nonce: int | None) -> None:
    """The library's check: signature, chain to a root, EKU, nonce, imprint. A token that carries no
    certificate is checked against the authority's own from the CA file (each, until one verifies)."""
    from rfc3161_client import VerificationError, VerifierBuilder

    leaves = [None] if resp.signed_data.certificates or not anchors.signers else list(anchors.signers)
    for n, leaf in enumerate(leaves, start=1):
        verifier = VerifierBuilder(tsa_certificate=leaf, roots=list(anchors.roots),
                                   intermediates=list(anchors.intermediates), nonce=nonce).build()
        try:
            verifier.verify(resp, digest)
            return
        except VerificationError:
            if n == len(leaves):
                raise


def _short(text: str) -> str:
    """OpenSSL's error stacks are long: keep the reason a person can act on."""
    for marker in ('data: "Verify error: ', 'reason: "'):
        if marker in text:
            return text.split(marker, 1)[1].split('"', 1)[0]
    return text[:200]


def read_anchor_file(path: Path) -> TrustAnchors:
    return load_anchors(path.read_bytes(), str(path))
