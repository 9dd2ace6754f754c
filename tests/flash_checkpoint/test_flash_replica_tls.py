"""Flash-checkpoint replicas over mutual TLS, end to end: `ftrun master` and two agents with
two torch ranks each (gloo), every process given the job's certificates (--rdzv-conf tls_cert,
tls_key, tls_ca, tls_client_auth=1; made at test time by the openssl CLI), ShardedCheckpointer
MEMORY saves every step, and a whole node SIGKILLed and replaced: the copies travel between
the agents' replica services over TLS, and the replacement's ranks restore their shards from
the survivor's replicas with zero steps lost and the weights of a fault-free run.

While the job runs, outsiders try the survivor's replica port: a plain-text HTTP/2 client gets
no HTTP/2 answer, and a TLS client that trusts the job's CA but has no certificate of its own is
refused; a client with the job's certificate is served (so the probes can tell).
(tests/integration/replica_trust_test.cc pushes a real gRPC copy over each of these.)
"""
import os
import re
import shutil
import socket
import ssl
import subprocess
import unittest

import test_flash_replica as replica
from test_flash_replica import FTRUN
from test_flash_memory import Processes

OPENSSL = shutil.which("openssl")
# The client connection preface of HTTP/2 (RFC 9113 3.4) and an empty SETTINGS frame.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def make_certificates(directory):
    """ca.pem, and server/client certificates (+ keys) it signed for localhost and 127.0.0.1."""
    def run(*args):
        subprocess.run([OPENSSL, *args], cwd=directory, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout",
            f"{who}.key", "-out", f"{who}.csr")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", f"{who}.pem")


def first_frame(sock):
    """The type of the first HTTP/2 frame the server sends after our preface, or None when
    it sends none (closes, or answers with something that is not HTTP/2)."""
    sock.settimeout(5)
    try:
        sock.sendall(H2_PREFACE)
        data = b""
        while len(data) < 9:
            chunk = sock.recv(9 - len(data))
            if not chunk:
                return None
            data += chunk
    except (OSError, ssl.SSLError):
        return None
    # A TLS server reads the preface as a broken record: an alert (0x15 0x03 ...), not a frame.
    return data[3] if data[:1] != b"\x15" else None


@unittest.skipUnless(os.access(FTRUN, os.X_OK), f"no ftrun binary at {FTRUN}")
@unittest.skipUnless(OPENSSL, "no openssl CLI")
class ReplicaTlsTest(Processes, unittest.TestCase):
    setUp = replica.ReplicaNodeLossTest.setUp
    fault_free = replica.ReplicaNodeLossTest.fault_free

    def tls_client(self, port, certificate):
        context = ssl.create_default_context(cafile=os.path.join(self.certs, "ca.pem"))
        context.set_alpn_protocols(["h2"])
        if certificate:
            context.load_cert_chain(os.path.join(self.certs, "client.pem"),
                                    os.path.join(self.certs, "client.key"))
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            return context.wrap_socket(raw, server_hostname="localhost")
        except (OSError, ssl.SSLError):
            raw.close()
            return None

    def outsiders(self, survivor_log):
        self.assertIn("tls=mutual", replica.read(os.path.join(self.root, "master.log")))
        m = re.search(r"replica service listening addr=127\.0\.0\.1:(\d+) tls=on", survivor_log)
        self.assertIsNotNone(m, survivor_log[-3000:])
        port = int(m.group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
            self.assertIsNone(first_frame(plain), "a plain-text client was answered")
        anonymous = self.tls_client(port, certificate=False)
        if anonymous is not None:  # TLS 1.3: the server's refusal comes after the handshake
            with anonymous:
                self.assertIsNone(first_frame(anonymous), "a client without a certificate")
        member = self.tls_client(port, certificate=True)
        self.assertIsNotNone(member, "a client with the job's certificate")
        with member:
            self.assertEqual(first_frame(member), 4, "no SETTINGS frame over TLS")

    def test_a_lost_nodes_shards_restore_from_replicas_copied_over_mutual_tls(self):
        self.certs = os.path.join(self.root, "certs")
        os.makedirs(self.certs)
        make_certificates(self.certs)
        c = self.certs
        security = (f",tls_cert={c}/server.pem,tls_key={c}/server.key,tls_ca={c}/ca.pem"
                    ",tls_client_auth=1")
        replica.ReplicaNodeLossTest.lose_a_node(self, spare=False, security=security,
                                                host="localhost",
                                                before_the_loss=self.outsiders)


if __name__ == "__main__":
    unittest.main()
