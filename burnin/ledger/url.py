"""A PostgreSQL ledger's URL: what messages may show of it, and whether it reaches the
database over the network without a verified TLS connection.

Every place that shows a ledger's location (errors, `--json` output, junit.xml through a
controller fault) shows `shown(url)`: each secret the URL may carry masked. The password
itself is refused in the URL (burnin/ledger/backends.py); `sslpassword` (the client key's
passphrase) and any other parameter whose name says it is a secret are accepted and
masked, since libpq reads them only from the URL or the service file.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, unquote, urlsplit

# A parameter whose name holds one of these is a secret, or the way to one (passfile):
# password, sslpassword, passfile; and whatever a later libpq adds under such a name.
SECRET_NAME = re.compile(r"(?i)pass|secret|token")
MASK = "***"
# sslmode values under which the client checks who the server is: anything less lets a
# man in the middle read the ledger's evidence and write its verdicts.
VERIFIED = ("verify-full", "verify-ca")


def shown(text: str) -> str:
    """`text` as a message may show it: the userinfo's password and the value of every
    secret parameter masked (also where the URL cannot be parsed)."""
    try:
        url = urlsplit(text)
        if url.password is not None:
            user = url.username or ""
            host = url.netloc.rpartition("@")[2]
            url = url._replace(netloc=f"{user}:{MASK}@{host}")
        query = url.query
    except ValueError:
        return text.split("://", 1)[0] + "://..."
    masked = "&".join(_mask_pair(pair) for pair in query.split("&")) if query else ""
    return url._replace(query=masked).geturl()


def _mask_pair(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    # libpq percent-decodes a parameter's name as it does its value: sslp%61ssword is
    # sslpassword to it, so the name is judged decoded.
    return f"{name}={MASK}" if eq and SECRET_NAME.search(unquote(name)) else pair


def scrub(message: str, text: str) -> str:
    """`message` (a database's error, which may quote what it was given) with every secret
    value of the URL `text` masked."""
    for secret in secrets_of(text):
        if secret:
            message = message.replace(secret, MASK)
    return message


def secrets_of(text: str) -> list[str]:
    try:
        url = urlsplit(text)
        found = [url.password] if url.password else []
        return found + [v for k, v in parse_qsl(url.query, keep_blank_values=True)
                        if SECRET_NAME.search(k) and v]
    except ValueError:
        return []


def hosts(text: str) -> list[str]:
    """The hosts a PostgreSQL URL names (its netloc's and host= / hostaddr=), in libpq's
    words: a host starting with / (or @, Linux's abstract namespace) is a unix socket."""
    url = urlsplit(text)
    query = dict(parse_qsl(url.query, keep_blank_values=True))
    named = [h for h in url.netloc.rpartition("@")[2].split(",") if h]
    named = [h.rsplit(":", 1)[0] if not h.startswith("[") else h for h in named]
    for key in ("host", "hostaddr"):
        if query.get(key):
            named += query[key].split(",")
    return named


def tls_problem(text: str) -> str:
    """Why the PostgreSQL URL `text` may reach its database unverified ('' when it cannot):
    a TCP host without sslmode=verify-full or verify-ca in the URL. A URL whose every host
    is a unix socket is fine; one with no host is libpq's default socket, unless PGHOST
    says otherwise; a service= entry is not read here, so the URL must say sslmode itself."""
    query = dict(parse_qsl(urlsplit(text).query, keep_blank_values=True))
    if query.get("sslmode") in VERIFIED:
        return ""
    named = hosts(text)
    if not named and not query.get("service"):
        named = [h for h in os.environ.get("PGHOST", "").split(",") if h]
    if query.get("hostaddr") or query.get("service") or \
            any(not h.startswith(("/", "@")) for h in named):
        mode = query.get("sslmode")
        return (f"it reaches the database over TCP with "
                f"{'sslmode=' + mode if mode else 'no sslmode'}: add sslmode=verify-full "
                "(and sslrootcert=CA) to the URL, so that burnin knows it talks to the "
                "database it names, or set quarantine.ledger_insecure: true in the inventory "
                "to accept an unverified connection")
    return ""
