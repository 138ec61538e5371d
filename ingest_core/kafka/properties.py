"""`consumerProperties` against the installed librdkafka, and the Java-client settings Druid specs carry.

Druid's consumer is the Java client; here it is librdkafka, which knows other names. So that a Druid spec
fails when it is validated, not when its first Spark job builds a consumer:
  - every name (and every literal value) is checked by librdkafka itself: `check_with_librdkafka` sets the
    properties on a real configuration object, followed by a name librdkafka cannot know, so the configuration
    is always refused before a client exists (nothing connects, no broker needed);
  - Java-only names are answered with their librdkafka equivalent (`JAVA_EQUIVALENTS`), or dropped with a
    warning where they mean nothing to a librdkafka consumer (deserializers: records are read as bytes);
  - `sasl.jaas.config` is translated (`translate_jaas`): PlainLoginModule / ScramLoginModule become
    sasl.username + sasl.password, Krb5LoginModule becomes sasl.kerberos.keytab + sasl.kerberos.principal.
    A literal value is checked at validation; a secret reference is translated where the client is built
    (`ingest_core.kafka.config`), and its password is redacted like every secret.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping

from confluent_kafka import Consumer, KafkaException

from ingest_core.core.defaults import KAFKA_CALL_TIMEOUT_S
from ingest_core.core.errors import IngestError, SpecError, SpecProblem, shown
from ingest_core.core.secrets import (
    DYNAMIC_PROVIDER_KEY,
    AirflowConnectionSecret,
    EnvironmentSecret,
)
from ingest_core.core.spec import DatasourceSpec, load_spec
from ingest_core.executor.formats.protobuf_descriptors import descriptor_problems

JAAS_KEY = "sasl.jaas.config"
PROPERTIES_PATH = "spec.ioConfig.consumerProperties"

# Java consumer settings librdkafka does not have, with what to write instead.
JAVA_EQUIVALENTS = {
    "ssl.truststore.location": "use ssl.ca.location with the CA certificate(s) as a PEM file (librdkafka reads no "
                               "Java truststore; export one with `keytool -exportcert -rfc -keystore FILE`)",
    "ssl.truststore.password": "remove it: ssl.ca.location is a PEM file, which has no password",
    "ssl.truststore.type": "remove it: ssl.ca.location is a PEM file",
    "ssl.truststore.certificates": "use ssl.ca.pem (the same PEM text)",
    "ssl.keystore.type": "remove it: librdkafka's ssl.keystore.location takes a PKCS#12 file (convert a JKS "
                         "keystore with `keytool -importkeystore -deststoretype PKCS12`), or use "
                         "ssl.certificate.location and ssl.key.location (PEM)",
    "ssl.keystore.certificate.chain": "use ssl.certificate.pem (the same PEM text)",
    "ssl.keystore.key": "use ssl.key.pem (the same PEM text)",
    "ssl.keymanager.algorithm": "remove it: a JVM security setting librdkafka does not have",
    "ssl.trustmanager.algorithm": "remove it: a JVM security setting librdkafka does not have",
    "ssl.secure.random.implementation": "remove it: a JVM security setting librdkafka does not have",
    "ssl.protocol": "remove it, or set ssl.enabled.protocols-like limits with ssl.cipher.suites",
    "sasl.login.callback.handler.class": "Java classes cannot run in librdkafka: for OAuth/OIDC set "
                                         "sasl.mechanism: OAUTHBEARER, sasl.oauthbearer.method: oidc and the "
                                         "sasl.oauthbearer.* settings",
    "sasl.client.callback.handler.class": "Java classes cannot run in librdkafka: for OAuth/OIDC set "
                                          "sasl.mechanism: OAUTHBEARER, sasl.oauthbearer.method: oidc and the "
                                          "sasl.oauthbearer.* settings",
    "receive.buffer.bytes": "use socket.receive.buffer.bytes",
    "send.buffer.bytes": "use socket.send.buffer.bytes",
}
# Java consumer settings with no meaning for this consumer: dropped, with a warning.
IGNORED_JAVA = {
    "key.deserializer": "records are read as bytes and decoded by the spec's inputFormat",
    "value.deserializer": "records are read as bytes and decoded by the spec's inputFormat",
    "exclude.internal.topics": "topics are named by topic or topicPattern, which never match internal topics "
                               "unless they say so",
}
# The Java client's deadline of its blocking calls: here the deadline of each call to the broker outside the Spark
# job (planning, the consumer-group mirror, dead-letter delivery); read here, never passed to librdkafka.
CALL_TIMEOUT_KEY = "default.api.timeout.ms"
_SENTINEL = "ingest.validation.sentinel"  # a name no librdkafka knows: keeps every check from building a client
_LOADS_CODE = {"plugin.library.paths"}  # librdkafka loads the libraries as it is set: not checked here
_UNKNOWN = re.compile(r'No such configuration property: "([^"]+)"')
_NAMED = re.compile(r'configuration property "([^"]+)"', re.I)


class JaasError(IngestError):
    """A sasl.jaas.config this consumer cannot translate; the message never holds the value."""

    code = "INGEST_KAFKA_JAAS_INVALID"


def call_timeout_s(props: Mapping[str, Any]) -> float:
    """The deadline of each blocking call to the broker: consumerProperties' `default.api.timeout.ms`, else
    `defaults.KAFKA_CALL_TIMEOUT_S` (also for a value validation refuses)."""
    ms = _milliseconds(props.get(CALL_TIMEOUT_KEY))
    return ms / 1000 if ms is not None else KAFKA_CALL_TIMEOUT_S


def _milliseconds(value: Any) -> int | None:
    try:
        ms = int(str(value).strip()) if value is not None and not isinstance(value, bool) else None
    except ValueError:
        return None
    return ms if ms is not None and ms >= 1 else None


# ------------------------------------------------------------------------------------------ sasl.jaas.config

_JAAS = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'\s*([\w.]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')
_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def translate_jaas(value: str, mechanism: str | None) -> dict[str, str]:
    """The librdkafka properties one JAAS login module stands for. Raises JaasError (without the value)."""
    m = _JAAS.match(value)
    if not m:
        raise JaasError("sasl.jaas.config is not a JAAS entry 'LoginModule required key=\"value\" ...;'")
    module, rest = m.group(1).rsplit(".", 1)[-1], m.group(3)
    options: dict[str, str] = {}
    pos = 0
    while rest[pos:].strip():
        opt = _JAAS_OPTION.match(rest, pos)
        if not opt:
            raise JaasError(f"sasl.jaas.config: cannot read the options of {module} after character {pos}")
        raw = opt.group(2)
        options[opt.group(1)] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
        pos = opt.end()
    if module in ("PlainLoginModule", "ScramLoginModule"):
        missing = [k for k in ("username", "password") if k not in options]
        if missing:
            raise JaasError(f"sasl.jaas.config: {module} needs {' and '.join(missing)}")
        out = {"sasl.username": options["username"], "sasl.password": options["password"]}
        if module == "PlainLoginModule" and mechanism is None:
            out["sasl.mechanism"] = "PLAIN"
        elif module == "ScramLoginModule" and (mechanism or "").upper() not in _SCRAM:
            raise JaasError("sasl.jaas.config: ScramLoginModule needs sasl.mechanism SCRAM-SHA-256 or "
                            "SCRAM-SHA-512 (as the Java client does)")
        return out
    if module == "Krb5LoginModule":
        out = {k: options[j] for j, k in (("keyTab", "sasl.kerberos.keytab"), ("principal", "sasl.kerberos.principal"))
               if j in options}
        if "sasl.kerberos.keytab" not in out:
            raise JaasError("sasl.jaas.config: Krb5LoginModule needs useKeyTab=true keyTab=\"...\" (librdkafka "
                            "has no ticket-cache login); or set sasl.kerberos.keytab and sasl.kerberos.principal")
        return out
    if module == "OAuthBearerLoginModule":
        raise JaasError("sasl.jaas.config: OAuthBearerLoginModule has no librdkafka translation: set "
                        "sasl.oauthbearer.method: oidc and sasl.oauthbearer.client.id, .client.secret, "
                        ".token.endpoint.url instead")
    raise JaasError(f"sasl.jaas.config: login module {module} has no librdkafka equivalent; supported: "
                    "PlainLoginModule, ScramLoginModule, Krb5LoginModule")


def to_librdkafka(resolved: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Resolved consumerProperties as librdkafka takes them (JAAS translated, ignored Java settings dropped),
    and the values the translation revealed that must be redacted (a JAAS password)."""
    props = {k: v for k, v in resolved.items() if k not in IGNORED_JAVA and k not in (JAAS_KEY, CALL_TIMEOUT_KEY)}
    secrets: list[str] = []
    if JAAS_KEY in resolved:
        for key in ("sasl.username", "sasl.password", "sasl.kerberos.keytab"):
            if key in props:
                raise JaasError(f"sasl.jaas.config and {key} are both set: keep one")
        mechanism = resolved.get("sasl.mechanism", resolved.get("sasl.mechanisms"))
        translated = translate_jaas(resolved[JAAS_KEY], mechanism)
        props.update(translated)
        secrets.extend(v for k, v in translated.items() if k == "sasl.password" and len(v) >= 3)
    return props, secrets


# ------------------------------------------------------------------------------------------ librdkafka

def check_with_librdkafka(props: Mapping[str, str], names_only: frozenset[str] = frozenset()) -> dict[str, str]:
    """{property: librdkafka's complaint} for every property librdkafka refuses (an unknown name, or a literal
    value it cannot take; "" for a complaint that names none). For names in `names_only` (secret references)
    only the name is checked."""
    problems: dict[str, str] = {}
    remaining = {k: ("x" if k in names_only else v) for k, v in props.items() if k not in _LOADS_CODE}
    for _ in range(len(props) + 1):
        try:
            Consumer({**remaining, "group.id": "ingest-validation", _SENTINEL: "1"}).close()
        except KafkaException as exc:
            message = exc.args[0].str()
        except (TypeError, ValueError) as exc:  # pragma: no cover - every value is a string here
            message = str(exc)
        else:  # pragma: no cover - librdkafka never accepts the sentinel
            return problems
        unknown = _UNKNOWN.search(message)
        name = unknown.group(1) if unknown else (_NAMED.search(message) or [None, None])[1]
        if name == _SENTINEL:
            return problems
        if name not in remaining:  # a complaint that names no property: reported on consumerProperties
            problems[""] = message
            return problems
        remaining.pop(name)
        if name in names_only and not unknown:  # the placeholder's fault: the name itself is known
            continue
        problems[name] = message
    return problems


def property_problems(props: Mapping[str, Any]) -> tuple[list[SpecProblem], list[SpecProblem]]:
    """(errors, warnings) for a spec's consumerProperties, each at its field path with what to write instead."""
    errors: list[SpecProblem] = []
    warnings: list[SpecProblem] = []
    checked: dict[str, str] = {}
    refs: set[str] = set()
    for key, value in props.items():
        path = f"{PROPERTIES_PATH}.{key}"
        is_ref = isinstance(value, (EnvironmentSecret, AirflowConnectionSecret))
        if key == DYNAMIC_PROVIDER_KEY:
            continue
        if key in JAVA_EQUIVALENTS:
            errors.append(SpecProblem(path, f"a Java-client setting librdkafka does not know: {JAVA_EQUIVALENTS[key]}"))
        elif key in IGNORED_JAVA:
            warnings.append(SpecProblem(path, f"ignored (a Java-client setting): {IGNORED_JAVA[key]}"))
        elif key == CALL_TIMEOUT_KEY:
            if _milliseconds(value) is None:
                errors.append(SpecProblem(path, f"expected a whole number of milliseconds, at least 1 (found "
                                                f"{shown(value)}): the deadline of each call to the broker"))
        elif key == JAAS_KEY:
            if not is_ref:  # a reference is translated where the client is built, once it has a value
                try:
                    literals = {k: _text(v) for k, v in props.items()
                                if not isinstance(v, (EnvironmentSecret, AirflowConnectionSecret))}
                    to_librdkafka(literals)
                except JaasError as exc:
                    errors.append(SpecProblem(path, str(exc)))
        elif is_ref:
            refs.add(key)
            checked[key] = "x"
        else:
            checked[key] = _text(value)
    for key, complaint in sorted(check_with_librdkafka(checked, frozenset(refs)).items()):
        if _UNKNOWN.search(complaint):
            hint = ("not a librdkafka consumer property: check the spelling against "
                    "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md")
        else:
            hint = f"librdkafka refuses it: {complaint}"
        errors.append(SpecProblem(f"{PROPERTIES_PATH}.{key}" if key else PROPERTIES_PATH, hint))
    return errors, warnings


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def check_spec(spec: DatasourceSpec) -> DatasourceSpec:
    """`spec` with its consumerProperties checked by librdkafka: raises SpecError listing every property
    librdkafka would refuse; ignored Java settings become warnings. Its protobuf descriptor files are read too."""
    errors, warnings = property_problems(spec.io_config.consumer_properties)
    errors += descriptor_problems(spec)
    if errors:
        raise SpecError(spec.source, errors)
    return dataclasses.replace(spec, warnings=spec.warnings + tuple(warnings)) if warnings else spec


def load_checked_spec(path: str | Path, *, strict: bool = False) -> DatasourceSpec:
    """`load_spec` plus the librdkafka check: what `ingest validate` and the DAG factory load. `strict`:
    unknown fields are errors (`load_spec`)."""
    return check_spec(load_spec(path, strict=strict))
