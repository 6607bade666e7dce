"""`mlgate_certs.rotation`: the self-managed webhook's certificate steps, one at a time, at chosen times."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from mlgate_certs.pki import make_ca
from mlgate_certs.rotation import ROTATE_CA, CertState, Lifetimes, due, dump, load, next_state

DNS = ["mlgate-webhook", "mlgate-webhook.mlgate-system.svc"]
IPS = ["127.0.0.1"]
NOW = dt.datetime.now(dt.UTC)
LIFETIMES = Lifetimes(ca_days=300, serving_days=30, propagation=dt.timedelta(seconds=15))


def step(state: CertState, now: dt.datetime = NOW, request: str = "",
         dns: list[str] = DNS) -> tuple[CertState, str] | None:
    return next_state(state, dns, IPS, now, lifetimes=LIFETIMES, rotate_request=request)


def installed() -> CertState:
    result = step(CertState())
    assert result is not None
    return result[0]


def trusted_by(bundle: tuple[x509.Certificate, ...], leaf: x509.Certificate) -> bool:
    """What the API server checks: some CA of the caBundle signed the serving certificate."""
    for ca in bundle:
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def test_an_empty_secret_gets_a_ca_and_a_serving_certificate_the_bundle_trusts() -> None:
    result = step(CertState())
    assert result is not None
    state, why = result
    assert why == "new CA and serving certificate"
    assert state.ca is not None and state.serving is not None and state.next_ca is None
    assert state.bundle == (state.ca.cert,)
    assert trusted_by(state.bundle, state.serving.cert)
    sans = state.serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(DNS)


def test_nothing_is_due_for_a_fresh_install() -> None:
    assert step(installed()) is None


def test_a_serving_certificate_past_two_thirds_of_its_life_is_renewed_from_the_same_ca() -> None:
    state = installed()
    assert state.serving is not None
    later = NOW + dt.timedelta(days=21)  # 2/3 of 30 days is 20
    assert due(state.serving.cert, later) and not due(state.serving.cert, NOW + dt.timedelta(days=19))
    result = step(state, later)
    assert result is not None
    renewed, why = result
    assert why == "serving certificate past 2/3 of its lifetime"
    assert renewed.ca == state.ca and renewed.bundle == state.bundle and renewed.serving != state.serving


def test_a_ca_past_two_thirds_of_its_life_starts_a_rollover() -> None:
    state = installed()
    assert state.ca is not None
    assert step(state, NOW + dt.timedelta(days=199), dns=DNS) is not None  # the serving one is due, not the CA
    result = step(state, NOW + dt.timedelta(days=201))  # 2/3 of 300 days is 200
    assert result is not None and result[1] == "CA past 2/3 of its lifetime: new CA added to the caBundle"
    assert result[0].next_ca is not None and result[0].ca == state.ca


def test_a_ca_rollover_adds_the_new_ca_first_and_signs_with_it_only_after_propagation() -> None:
    state = installed()
    assert state.ca is not None and state.serving is not None
    later = NOW + dt.timedelta(hours=1)
    first = step(state, later, request="now")
    assert first is not None
    added, why = first
    assert why == "CA rollover requested: new CA added to the caBundle"
    assert added.next_ca is not None and added.serving == state.serving and added.ca == state.ca
    assert added.bundle == (state.ca.cert, added.next_ca.cert)
    assert step(added, later + dt.timedelta(seconds=14), request="now") is None  # not yet trusted everywhere
    second = step(added, later + dt.timedelta(seconds=15), request="now")
    assert second is not None
    switched, why = second
    assert why == "serving certificate issued by the new CA"
    assert switched.ca == added.next_ca and switched.next_ca is None and switched.serving is not None
    # old and new serving certificates are both trusted: a replica that has not reloaded yet loses nothing
    assert trusted_by(switched.bundle, switched.serving.cert) and trusted_by(switched.bundle, state.serving.cert)
    assert not trusted_by((state.ca.cert,), switched.serving.cert)


def test_a_rollover_request_is_acted_on_once() -> None:
    state = installed()
    first = step(state, request="2026-11-27T01:00:00")
    assert first is not None and first[1] == "CA rollover requested: new CA added to the caBundle"
    second = step(first[0], NOW + dt.timedelta(seconds=20), request="2026-11-27T01:00:00")
    assert second is not None
    assert step(second[0], NOW + dt.timedelta(seconds=40), request="2026-11-27T01:00:00") is None
    assert step(second[0], NOW + dt.timedelta(seconds=40), request="2026-11-27T02:00:00") is not None


def test_a_changed_service_name_gets_a_new_serving_certificate() -> None:
    result = step(installed(), dns=["mlgate-webhook.other.svc"])
    assert result is not None and result[1] == "serving certificate names changed"


def test_an_expired_old_ca_leaves_the_bundle() -> None:
    old = make_ca(days=10)
    new = installed()
    assert new.ca is not None
    state = CertState(new.ca, new.serving, None, (old.cert, new.ca.cert))
    assert step(state) is None  # the old CA is still valid: kept
    result = step(state, old.not_after + dt.timedelta(seconds=1))
    assert result is not None
    assert result[0].bundle == (new.ca.cert,) and result[1] == "expired CA left out of the caBundle"


def test_the_secret_round_trips_every_part_of_the_state() -> None:
    first = step(installed(), request="r1")
    assert first is not None
    data, annotations = dump(first[0])
    assert dump(load(data, {**annotations, ROTATE_CA: "r1"})) == (data, annotations)


def test_an_unreadable_secret_part_is_made_again() -> None:
    data, annotations = dump(installed())
    data["tls.key"] = b"not a key"
    state = load(data, annotations)
    assert state.serving is None and state.ca is not None
    result = step(state)
    assert result is not None and result[1] == "no serving certificate"
