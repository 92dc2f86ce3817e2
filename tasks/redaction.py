"""Secrets kept out of every message: the one way a URL is shown, and the scrub of texts (a
driver's error, a store's answer) that may quote a URL's secrets.

`redacted_url` shows a URL with its password and every query value as `***`. All query values
are hidden, not only those of known credential names: signed URLs of S3, GCS, Azure and CDNs
spread a credential over vendor-specific parameters (`sig`, `se`, `X-Amz-Credential`,
`Key-Pair-Id`, ...) that no list keeps up with, and a value an operator needs is in their own
spec or environment. The names stay, so the line still says what was set.

A user's password may hold `@`, spaces, `/` or `?` unencoded: the user part ends at the LAST `@`
after `://`. When that split is ambiguous (a `/`, `?` or `#` before the last `@`) nothing between
`://` and the last `@` is shown, whatever a parser would make of it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

MASK = "***"

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_AUTHORITY_END = re.compile(r"[/?#]")
_DELIMITERS = re.compile(r"[@:/?#&=\s]")

_DATABASE_SCHEMES = frozenset(
    {"postgresql", "postgres", "mysql", "mariadb", "mssql", "oracle", "redis", "mongodb", "duckdb"}
)
"""Schemes whose user part without a password is a role name (peer or certificate login), shown;
elsewhere a lone user part is a token (`https://<token>@host`, a git or HTTP basic credential)."""

_CREDENTIAL_NAMES = frozenset(
    {
        "sig",
        "sas",
        "key",
        "code",
        "pwd",
        "auth",
        "authorization",
        "signature",
        "policy",
        "keypairid",
    }
)
_CREDENTIAL_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "signature",
    "credential",
    "apikey",
    "accesskey",
    "privatekey",
    "accountkey",
    "sessionkey",
    "sastoken",
)

_MIN_FRAGMENT = 3
"""Shorter pieces of a password are not scrubbed on their own: they would blank ordinary text."""


def is_credential_parameter(name: str) -> bool:
    """Whether a query parameter named `name` can carry a credential (case, `-` and `_` ignored):
    `token`, `sig`, `X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`,
    `aws_secret_access_key`, `access_key`, `client_secret`, `password`, `key`, `sas`, `code`, ..."""
    folded = re.sub(r"[^a-z0-9]", "", name.lower())
    return folded in _CREDENTIAL_NAMES or any(word in folded for word in _CREDENTIAL_WORDS)


@dataclass(frozen=True)
class UrlParts:
    """A URL cut the way redaction reads it; `userinfo` is None when there is no `@` part."""

    scheme: str
    userinfo: str | None
    rest: str
    """Host, port, path, query and fragment: everything after the user part."""

    @property
    def clean_userinfo(self) -> bool:
        """Whether every parser agrees where the user part ends (nothing that ends an authority inside it)."""
        return self.userinfo is not None and not _AUTHORITY_END.search(self.userinfo)

    @property
    def password(self) -> str | None:
        """The secret of the user part: after its first `:`; all of it when the split is ambiguous
        or, outside database schemes, when it has no `:` (a token)."""
        if self.userinfo is None:
            return None
        user, colon, password = self.userinfo.partition(":")
        if colon and self.clean_userinfo:
            return password
        if not colon and self.clean_userinfo and self.scheme.lower() in _DATABASE_SCHEMES:
            return None
        return self.userinfo

    def query_items(self) -> list[tuple[str, str | None]]:
        """(name, value) of each query item; value None for an item without `=`."""
        query = self.rest.partition("#")[0].partition("?")[2]
        items = []
        for item in filter(None, query.split("&")):
            name, equals, value = item.partition("=")
            items.append((name, value) if equals else (item, None))
        return items


def url_parts(url: str) -> UrlParts | None:
    """`url` cut into scheme, user part and the rest; None when it has no `scheme://`."""
    found = _SCHEME.match(url)
    if found is None:
        return None
    after = url[found.end() :]
    # `scheme:///path` has an empty authority: an `@` further on is in the path.
    at = -1 if after.startswith("/") else after.rfind("@")
    return UrlParts(found["scheme"], after[:at] if at >= 0 else None, after[at + 1 :])


def redacted_url(url: str) -> str:
    """`url` as every message shows it: the user part's password, a token standing as the user
    part, every query value and the fragment as `***`; a text that is no URL is returned as it is."""
    parts = url_parts(url)
    if parts is None:
        return url
    shown = f"{parts.scheme}://"
    if parts.userinfo is not None:
        secret = parts.password
        if secret is None:
            shown += parts.userinfo + "@"
        elif secret == parts.userinfo:
            shown += f"{MASK}@"
        else:
            shown += f"{parts.userinfo.partition(':')[0]}:{MASK}@"
    before_fragment, hash_, fragment = parts.rest.partition("#")
    location, question, query = before_fragment.partition("?")
    shown += location
    if question:
        shown += "?" + "&".join(
            (f"{name}={MASK}" if value else f"{name}=") if value is not None else MASK
            for name, value in parts.query_items()
        )
    if hash_:
        shown += "#" + (MASK if fragment else "")
    return shown


def redacted_text(text: str) -> str:
    """`text` with every URL in it shown by `redacted_url`; a text that is one URL as a whole (a
    spec value, a setting) is redacted as one, so a password with spaces stays hidden."""
    if _SCHEME.match(text.strip()):
        return redacted_url(text)
    return _URL_IN_TEXT.sub(lambda found: redacted_url(found[0]), text)


def url_secrets(url: str) -> list[str]:
    """The secrets of `url`: the user part's password and each credential parameter's value, as
    written and percent-decoded."""
    parts = url_parts(url)
    if parts is None:
        return []
    found = [parts.password] if parts.password else []
    found += [value for name, value in parts.query_items() if value and is_credential_parameter(name)]
    return sorted({*found, *(urllib.parse.unquote(s) for s in found)}, key=len, reverse=True)


def _pieces(secret: str) -> set[str]:
    """Each piece of `secret` between delimiters (`@`, `:`, `/`, `?`, `#`, `&`, `=`, spaces): a driver
    that splits a URL at another `@` than the last quotes such a piece ("ss word@host")."""
    cuts = [0, *(m.start() for m in _DELIMITERS.finditer(secret)), len(secret)]
    pieces = set()
    for i, start in enumerate(cuts):
        for end in cuts[i + 1 :]:
            piece = secret[start:end].lstrip("@:/?#&= \t")
            if len(piece) >= _MIN_FRAGMENT and piece != secret:
                pieces.add(piece)
    return pieces


def scrubbed(text: str, *, url: str | None = None, secrets: Iterable[str] = ()) -> str:
    """`text` with `url` shown redacted, and every secret of `url` and each of `secrets` as `***`,
    whole or any piece of it a driver may quote."""
    if url:
        text = text.replace(url, redacted_url(url))
    whole = {*(url_secrets(url) if url else ()), *filter(None, secrets)}
    for secret in sorted(whole, key=len, reverse=True):
        text = text.replace(secret, MASK)
    # A piece stands alone where a driver quotes it, never inside a longer word: "word" of
    # "pass@word" is blanked in `"word@host"` but leaves "password authentication failed" alone.
    for piece in sorted(set().union(*map(_pieces, whole)), key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(piece)}(?![A-Za-z0-9])", MASK, text)
    return text
