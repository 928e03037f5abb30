"""Secrets taken out of text that leaves voxpipe: error messages, warnings, reprs.

A URL may carry credentials: user-info (``https://user:PASSWORD@host/...``) and the query
parameters of a presigned or shared-access URL (S3's ``X-Amz-Signature``, ``X-Amz-Credential``
and ``X-Amz-Security-Token``, GCS's ``X-Goog-Signature`` and ``X-Goog-Credential``, Azure SAS's
``sig``, and the ``Signature`` and ``token`` of older schemes). Anyone who can read a log, a
traceback or a pickled error could use them, so every message names such a URL with those parts
replaced; what the URL points at (scheme, host, key, other parameters) stays, so that the message
still says which object failed. The C++ core applies the same rule to its errors
(src/core/error.cpp).

A foundation module: imports nothing from voxpipe.
"""

from __future__ import annotations

import re

REDACTED = "REDACTED"

# Parameter names compared without regard to case, as servers compare them.
SECRET_PARAMETERS = ("X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
                     "X-Goog-Signature", "X-Goog-Credential", "sig", "Signature", "token")

# scheme://USERINFO@ : the user-info ends at the first "@" before the host's "/", "?" or "#".
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s'\"]*@")
# ?NAME=VALUE or &NAME=VALUE (";" too): the value ends where the parameter, the URL or a quote
# does.
_PARAMETER = re.compile(
    r"([?&;](?:%s)=)[^&#;\s'\"]*" % "|".join(re.escape(p) for p in SECRET_PARAMETERS),
    re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by REDACTED (user-info and the
    secret query parameters above); unchanged when it holds none. Applying it twice is applying
    it once."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return _PARAMETER.sub(lambda m: m.group(1) + REDACTED, text)
