"""A throwaway certificate authority for the secured embedded Kafka (`ingest_core.dev.embedded.SecuredKafka`):
a CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files made with the
`cryptography` package (Airflow's own dependency). Development tooling only.

`python -m ingest_core.dev.tls FOLDER --host kafka --host localhost [--days N]` makes the CA and a server certificate
for those hosts (no client certificate): docker-compose.yaml's `kafka-tls` service does, for its broker."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TlsFiles:
    """Where the PEM files are. `server` holds the server's key (unencrypted PKCS#8) and its certificate: Kafka's
    `ssl.keystore.type=PEM` file. `client_key` is encrypted with `client_key_password`, as a production key is."""

    folder: Path
    client_key_password: str | None  # None: no client certificate

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def server(self) -> Path:
        return self.folder / "server.pem"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ingest tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _certificate(subject: str, key: rsa.RSAPrivateKey, issuer: x509.Name | None, issuer_key: rsa.RSAPrivateKey,
                 *, ca: bool, usage: ExtendedKeyUsageOID | None = None,
                 hosts: tuple[str, ...] = (), days: int = 30) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer or _name(subject))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: rsa.RSAPrivateKey, password: str | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def make_tls_files(folder: Path, client_key_password: str | None,
                   hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), client_name: str = "ingest-client",
                   days: int = 30) -> TlsFiles:
    """A CA, the server's certificate (subject alternative names: `hosts`) and, with a `client_key_password`, a
    client certificate, written under `folder` (private: 0700), each valid for `days`."""
    files = TlsFiles(folder, client_key_password)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca_key = _key()
    ca = _certificate("ingest tests CA", ca_key, None, ca_key, ca=True, days=days)
    server_key = _key()
    server = _certificate("localhost", server_key, ca.subject, ca_key, ca=False,
                          usage=ExtendedKeyUsageOID.SERVER_AUTH, hosts=hosts, days=days)
    files.ca.write_bytes(_pem(ca))
    files.server.write_bytes(_key_pem(server_key) + _pem(server) + _pem(ca))
    files.server.chmod(0o600)
    if client_key_password is not None:
        client_key = _key()
        client = _certificate(client_name, client_key, ca.subject, ca_key, ca=False,
                              usage=ExtendedKeyUsageOID.CLIENT_AUTH, days=days)
        files.client_cert.write_bytes(_pem(client))
        files.client_key.write_bytes(_key_pem(client_key, client_key_password))
        files.client_key.chmod(0o600)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ingest_core.dev.tls",
                                     description="Make a CA (ca.pem) and a server certificate with its key "
                                                 "(server.pem, Kafka's ssl.keystore.type=PEM) in FOLDER.")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--host", action="append", required=True, help="a name or address the certificate is for")
    parser.add_argument("--days", type=int, default=30, help="validity (default: 30)")
    args = parser.parse_args(argv)
    files = make_tls_files(args.folder, None, hosts=tuple(args.host), days=args.days)
    print(f"{files.ca} and {files.server} (for {', '.join(args.host)}, {args.days} days)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
