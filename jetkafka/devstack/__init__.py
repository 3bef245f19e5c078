"""A real local ZooKeeper and Kafka-protocol broker for development and tests.

* :class:`ZooKeeperServer` / :class:`ZooKeeperEnsemble` run Apache ZooKeeper from pyspark's jars.
* :class:`LocalBroker` runs noida-db's Kafka service; build clients with :func:`client_config`.
* :class:`DevStack` keeps one of each running in a state directory (``jetkafka dev up``).

Every failure to start or stop raises :class:`~jetkafka.errors.DevStackError` with the fix.
Needs the ``devstack`` extra: ``pip install 'jetkafka[devstack]'``; without it, importing this
package raises :class:`~jetkafka.errors.MissingExtra`.
"""

from jetkafka._extras import require_extra

# Before the package's imports, so that without the extra the error names it and its install
# command rather than a third-party module (tests/test_extras.py).
require_extra("devstack", __name__)

from jetkafka.devstack._broker import LocalBroker, client_config, find_noida_binary  # noqa: E402 - after require_extra on purpose
from jetkafka.devstack._ports import check_port_free, free_port, free_ports, is_port_free  # noqa: E402 - after require_extra on purpose
from jetkafka.devstack._process import ProcessRecord, ServerProcess  # noqa: E402 - after require_extra on purpose
from jetkafka.devstack._stack import DevStack, StackInfo, default_state_dir  # noqa: E402 - after require_extra on purpose
from jetkafka.devstack._zookeeper import ZooKeeperEnsemble, ZooKeeperServer, find_java  # noqa: E402 - after require_extra on purpose

__all__ = [
    "DevStack",
    "LocalBroker",
    "ProcessRecord",
    "ServerProcess",
    "StackInfo",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "check_port_free",
    "client_config",
    "default_state_dir",
    "find_java",
    "find_noida_binary",
    "free_port",
    "free_ports",
    "is_port_free",
]
