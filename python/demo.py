"""The quick-start demonstration: a node that never loses a journaled write.

Starts a node on a temporary data directory, inserts and queries through
pymongo, kills the node with SIGKILL, restarts it on the same directory and
shows that every journaled write is still there, then stops it cleanly.
"""

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pymongo import MongoClient, WriteConcern  # noqa: E402

from slipstream_testing import Node  # noqa: E402

DOCUMENTS = 10_000


def step(message):
    print(f"--> {message}", flush=True)


def main() -> int:
    dbpath = tempfile.mkdtemp(prefix="slipstream-demo-")
    node = Node(dbpath=dbpath)
    try:
        node.start()
        step(f"node running on port {node.port}, dbpath {dbpath} (log: {node.log_path})")
        client = MongoClient(node.uri)
        print("    server version", client.server_info()["version"])
        orders = client.shop.get_collection("orders", write_concern=WriteConcern(j=True))
        orders.create_index("customer")
        orders.insert_many([{"_id": i, "customer": f"c{i % 100}", "total": i % 250} for i in range(DOCUMENTS)])
        orders.update_many({"customer": "c7"}, {"$inc": {"total": 1000}})
        orders.delete_many({"total": {"$lt": 10}})
        step(f"inserted {DOCUMENTS} orders with j:true, updated and deleted some")
        expected = sorted((d["_id"], d["total"]) for d in orders.find())
        big = list(orders.aggregate([{"$match": {"total": {"$gte": 1000}}},
                                     {"$group": {"_id": "$customer", "n": {"$sum": 1}}}]))
        step(f"query: {len(expected)} orders remain; customers with totals >= 1000: {big}")
        plan = orders.find({"customer": "c42"}).explain()["queryPlanner"]["winningPlan"]
        step(f"plan for {{customer: 'c42'}}: {plan.get('stage')} <- {plan.get('inputStage', {}).get('stage')}")
        client.close()

        node.kill()
        step("node killed with SIGKILL (no shutdown, no checkpoint)")

        node.start()
        client = MongoClient(node.uri)
        recovered = sorted((d["_id"], d["total"]) for d in client.shop.orders.find())
        engine = client.admin.command("serverStatus").get("slipstream", {})
        checkpoint = engine.get("checkpoint", {}).get("timestamp")
        oplog = engine.get("oplog", {})
        step(f"restarted: {len(recovered)} orders found; recovery opened the checkpoint at {checkpoint} "
             f"and replayed the journal up to {oplog.get('last')} "
             f"({engine.get('journal', {}).get('entries')} oplog entries in the journal)")
        client.close()
        if recovered != expected:
            print(f"FAIL: {len(expected)} expected, {len(recovered)} recovered", file=sys.stderr)
            return 1
        step("every journaled write survived the crash")
        code = node.stop()
        step(f"node stopped cleanly (exit {code})")
        return 0 if code == 0 else 1
    finally:
        node.kill()
        shutil.rmtree(dbpath, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
