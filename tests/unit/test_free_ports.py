"""The local stack's ports: the ones asked for together are all different, each free to bind."""
from __future__ import annotations

import socket

from chalicelib.local.processes import LOOPBACK, free_port, free_ports


def test_ports_asked_for_together_are_different_and_free():
    ports = free_ports(64)
    assert len(set(ports)) == 64
    for port in ports[:8]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, port))


def test_one_port_is_a_port():
    assert 0 < free_port() < 65536
