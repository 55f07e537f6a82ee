"""The app id's lease records Spark's query id beside an owner of another name, and
the driver's listener finds the name by it (issue 51, finding 3: under Spark Connect a
foreachBatch sink's option ``query.id`` names the dedup step's decisions and lease,
while the listener hears the query by Spark's id)."""

from __future__ import annotations

import pytest

from dedup import DedupConfig, RedisConfig
from dedup.catalog import RedisCatalog

pytestmark = [pytest.mark.integration, pytest.mark.redis]


def test_the_lease_names_its_owner_for_the_spark_query_id_it_records(
        redis_url: str, app_id: str) -> None:
    config = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url))
    tasks = RedisCatalog(config, spark_query_id="spark-1")
    fence = tasks.take_lease("orders-q")
    driver = RedisCatalog(config)
    assert driver.lease_name("spark-1") == "orders-q"
    assert driver.lease_name("spark-2") == "spark-2"
    # the listener's renewal under the name keeps the record and the fence
    assert driver.take_lease("orders-q", spark_query_id="spark-1") == fence
    assert driver.take_lease("orders-q") == fence
    assert driver.lease_name("spark-1") == "orders-q"
    driver.release("orders-q")
    # a new owner without a Spark id of its own drops the old record
    assert driver.take_lease("spark-3") == fence + 1
    assert driver.lease_name("spark-1") == "spark-1"
