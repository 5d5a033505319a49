"""The raftmq pytest plugin, loaded the way a conftest below a project's rootdir loads it."""

from raftmq.testing import *  # noqa: F403 - the plugin's hook and fixtures
