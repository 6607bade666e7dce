"""The Kubernetes CEL libraries cel-cpp lacks, in Python, after k8s.io/apiserver/pkg/cel/library:
lists.go (sum, min, max, isSorted; not indexOf and lastIndexOf on lists, which cel-cpp refuses to declare
beside the strings extension's indexOf), regex.go (find, findAll), quantity.go (quantity,
isQuantity and the Quantity methods), urls.go (url, isURL and the getters), ip.go and cidr.go (ip, isIP, cidr,
isCIDR and their methods).

cel-expr-python cannot return a new opaque type from Python, so a Quantity, URL, IP or CIDR is a map with one
key (`{"quantity": "1500m"}`) in canonical form: equality works as in Kubernetes (`quantity('1') ==
quantity('1000m')`), and the methods take and give these maps. A function that fails raises, and cel-cpp turns
that into a runtime error, which the policy's failurePolicy decides.
Regular expressions run on Python's `re`, not RE2: patterns are limited to MAX_PATTERN characters.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from mlgate.rules.common import quantity as parse_quantity

MAX_PATTERN = 1000


# --- lists (lists.go) --------------------------------------------------------------------------------------------


def _sum(items: list[Any]) -> Any:
    return sum(items) if items else 0


def _min(items: list[Any]) -> Any:
    if not items:
        raise ValueError("min called on an empty list")
    return min(items)


def _max(items: list[Any]) -> Any:
    if not items:
        raise ValueError("max called on an empty list")
    return max(items)


def _sorted(items: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(items))


# --- regex (regex.go) --------------------------------------------------------------------------------------------


def _pattern(pattern: str) -> re.Pattern[str]:
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a regular expression longer than {MAX_PATTERN} characters")
    return re.compile(pattern)


def _find(text: str, pattern: str) -> str:
    found = _pattern(pattern).search(text)
    return found.group(0) if found else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    found = [m.group(0) for m in _pattern(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


# --- quantity (quantity.go) --------------------------------------------------------------------------------------


def _amount(value: Any) -> Decimal:
    if isinstance(value, dict) and "quantity" in value:
        return Decimal(value["quantity"])
    if isinstance(value, int):
        return Decimal(value)
    raise ValueError(f"not a quantity: {value!r}")


def _q(amount: Decimal) -> dict[str, str]:
    normal = amount.normalize()
    return {"quantity": format(normal, "f")}


def _quantity(text: str) -> dict[str, str]:
    amount = parse_quantity(text)
    if amount is None:
        raise ValueError(f"quantities must match the regular expression of a Kubernetes quantity: {text!r}")
    return _q(amount)


def _is_quantity(text: str) -> bool:
    return parse_quantity(text) is not None


def _compare(a: Any, b: Any) -> int:
    left, right = _amount(a), _amount(b)
    return (left > right) - (left < right)


def _as_integer(q: Any) -> int:
    amount = _amount(q)
    if amount != amount.to_integral_value() or abs(amount) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return int(amount)


QUANTITY_METHODS: dict[str, Callable[..., Any]] = {
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "add": lambda a, b: _q(_amount(a) + _amount(b)),
    "sub": lambda a, b: _q(_amount(a) - _amount(b)),
    "asInteger": _as_integer,
    "isInteger": lambda q: _amount(q) == _amount(q).to_integral_value() and abs(_amount(q)) < 2**63,
    "asApproximateFloat": lambda q: float(_amount(q)),
}  # not `sign`: kube-apiserver v1.35 refuses `quantity('1').sign()` in a policy (tests/e2e/vap_cases/library.yaml)


# --- url (urls.go) -----------------------------------------------------------------------------------------------


def _url(text: str) -> dict[str, str]:
    parts = urlsplit(text)
    if not (parts.scheme and parts.netloc) and not text.startswith("/"):
        raise ValueError(f"URL must be an absolute URI or an absolute path: {text!r}")
    return {"url": text}


def _is_url(text: str) -> bool:
    try:
        _url(text)
    except ValueError:
        return False
    return True


def _port(u: dict[str, str]) -> str:
    netloc = urlsplit(u["url"]).netloc.rsplit("@", 1)[-1]
    host, colon, port = netloc.rpartition(":")
    return port if colon and not port.endswith("]") and host else ""


URL_METHODS: dict[str, Callable[..., Any]] = {
    "getScheme": lambda u: urlsplit(u["url"]).scheme,
    "getHost": lambda u: urlsplit(u["url"]).netloc.rsplit("@", 1)[-1],
    "getHostname": lambda u: (urlsplit(u["url"]).hostname or ""),
    "getPort": _port,
    "getEscapedPath": lambda u: urlsplit(u["url"]).path,
    "getQuery": lambda u: {k: [v] for k, v in (p.split("=", 1) if "=" in p else (p, "")
                                               for p in urlsplit(u["url"]).query.split("&") if p)},
}


# --- ip and cidr (ip.go, cidr.go) --------------------------------------------------------------------------------


def _ip_address(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    text = value["ip"] if isinstance(value, dict) else value
    if "%" in text:
        raise ValueError(f"IP address with zone value is not allowed: {text!r}")
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address is not allowed: {text!r}")
    return address


def _ip(text: str) -> dict[str, str]:
    return {"ip": str(_ip_address(text))}


def _network(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    text = value["cidr"] if isinstance(value, dict) else value
    return ipaddress.ip_network(text, strict=False)


def _cidr(text: str) -> dict[str, str]:
    _ip_address(text.split("/", 1)[0])
    _network(text)
    return {"cidr": text}


def _valid(fn: Callable[[str], Any]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            fn(text)
        except ValueError:
            return False
        return True

    return check


IP_METHODS: dict[str, Callable[..., Any]] = {
    "family": lambda i: _ip_address(i).version,
    "isUnspecified": lambda i: _ip_address(i).is_unspecified,
    "isLoopback": lambda i: _ip_address(i).is_loopback,
    "isLinkLocalMulticast": lambda i: _ip_address(i).is_multicast and _ip_address(i).is_link_local,
    "isLinkLocalUnicast": lambda i: _ip_address(i).is_link_local and not _ip_address(i).is_multicast,
    "isGlobalUnicast": lambda i: not (_ip_address(i).is_multicast or _ip_address(i).is_loopback
                                      or _ip_address(i).is_link_local or _ip_address(i).is_unspecified
                                      or str(_ip_address(i)) == "255.255.255.255"),
}
CIDR_METHODS: dict[str, Callable[..., Any]] = {
    "containsIP": lambda c, i: _ip_address(i) in _network(c),
    "containsCIDR": lambda c, o: _network(o).subnet_of(_network(c))  # type: ignore[arg-type]
    if _network(o).version == _network(c).version else False,
    "masked": lambda c: {"cidr": str(_network(c))},
    "prefixLength": lambda c: _network(c).prefixlen,
}


def declarations(cel: Any) -> list[Any]:
    """The FunctionDecls of these libraries for cel.NewEnv, with their Python implementations."""
    T = cel.Type
    dyn, string, boolean, integer = T.DYN, T.STRING, T.BOOL, T.INT
    opaque = T.Map(T.STRING, T.STRING)  # a Quantity, URL, IP or CIDR (see the module's docstring)
    any_list = T.List(T.DYN)

    def fn(name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]) -> Any:
        return cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=member, impl=impl)
                                       for oid, ret, params, member, impl in overloads])

    decls = [
        fn("sum", ("list_sum", dyn, [any_list], True, _sum)),
        fn("min", ("list_min", dyn, [any_list], True, _min)),
        fn("max", ("list_max", dyn, [any_list], True, _max)),
        fn("isSorted", ("list_is_sorted", boolean, [any_list], True, _sorted)),
        fn("find", ("string_find", string, [string, string], True, _find)),
        fn("findAll", ("string_find_all", T.List(string), [string, string], True, _find_all),
           ("string_find_all_n", T.List(string), [string, string, integer], True, _find_all)),
        # a YAML integer (`nvidia.com/gpu: 8`) reaches the API server's CEL as the string "8": both forms are taken
        fn("quantity", ("quantity_parse", opaque, [string], False, _quantity),
           ("quantity_int", opaque, [integer], False, lambda n: _quantity(str(n)))),
        fn("isQuantity", ("is_quantity", boolean, [string], False, _is_quantity)),
        fn("url", ("url_parse", opaque, [string], False, _url)),
        fn("isURL", ("is_url", boolean, [string], False, _is_url)),
        fn("ip", ("ip_parse", opaque, [string], False, _ip),
           # the address as written, not the network's: cidr('10.1.2.3/16').ip() == ip('10.1.2.3') (ip.go)
           ("cidr_ip", opaque, [opaque], True, lambda c: {"ip": str(_ip_address(c["cidr"].split("/", 1)[0]))})),
        fn("isIP", ("is_ip", boolean, [string], False, _valid(_ip))),
        fn("cidr", ("cidr_parse", opaque, [string], False, _cidr)),
        fn("isCIDR", ("is_cidr", boolean, [string], False, _valid(_cidr))),
    ]
    # a Python implementation is found by the runtime types of its arguments, so `dyn` does not take a map:
    # methods with an argument get one overload per type it may have
    second = {"add": integer, "sub": integer, "containsIP": string, "containsCIDR": string}
    for table in (QUANTITY_METHODS, URL_METHODS, IP_METHODS, CIDR_METHODS):
        for name, impl in table.items():
            params = [opaque] * impl.__code__.co_argcount
            overloads = [(f"{name}_member", dyn, params, True, impl)]
            if name in second:
                overloads.append((f"{name}_member_{second[name].name().lower()}", dyn, [opaque, second[name]], True,
                                  impl))
            decls.append(fn(name, *overloads))
    return decls
