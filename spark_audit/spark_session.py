"""The SparkSession the audit runs in: `local[*]` by default with quiet, fast settings (no UI,
few shuffle partitions, loopback only); a standalone master (`spark://HOST:PORT`) or a Spark
Connect server (`sc://HOST:PORT`) run the same job unchanged (docs/audit.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

QUIET_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Adaptive execution re-plans at every shuffle: on an audit's many small stages that costs
    # more than it saves (measured: 31 s -> 21 s for five chaos runs on local[2]).
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "4g",  # local mode: the executors are the driver; a large audit caches its facts
}


def spark_session(master: str | None = None, remote: str | None = None, app: str = "raftmq-audit",
                  conf: dict[str, str] | None = None, jvm_log: Path | None = None) -> Any:
    """A session on `master` (default `local[*]`) or, with `remote`, a Spark Connect session.
    The workers run this interpreter (so they import raftmq and spark_audit as the driver does).
    With `jvm_log`, a driver JVM started here writes its stdout and stderr there (the JVM's own
    warnings, Spark's log lines, the Python workers' stderr), not on the terminal; a session
    already running is taken as it is."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_audit.sources import register

    builder = SparkSession.builder.appName(app)
    if remote is not None:
        builder = builder.remote(remote)
    else:
        log4j = Path(__file__).with_name("log4j2.properties")
        settings = {**QUIET_CONF, **(conf or {}), "spark.master": master or "local[*]", "spark.app.name": app,
                    "spark.pyspark.python": sys.executable,
                    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"}
        if jvm_log is not None:
            _start_driver(settings, jvm_log)
        for key, value in settings.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if remote is None:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _start_driver(settings: dict[str, str], log: Path) -> None:
    """Start the driver JVM (unless one runs) with its stdout and stderr in `log`: PySpark's
    own launcher, given where the JVM's output goes (`launch_gateway`'s `popen_kwargs`)."""
    from pyspark import SparkConf, SparkContext, java_gateway

    if SparkContext._active_spark_context is not None:
        return
    spark_conf = SparkConf().setAll(list(settings.items()))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:  # the JVM holds its own copy of the descriptor
        launch: Any = java_gateway.launch_gateway  # untyped in pyspark
        gateway = launch(spark_conf, popen_kwargs={"stdout": out, "stderr": out})
    SparkContext(conf=spark_conf, gateway=gateway)
