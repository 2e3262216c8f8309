"""A real dramatiq worker process for the worker-death test: `python -m tests.worker.worker_main PREFIX`.

It consumes the run queues `<PREFIX>-<device>` on the local RabbitMQ with one thread, against
the database named by DATABASE_URL, until it is killed. With KERNELOPT_TEST_SCRIPTED_LOOP=block
the round loop is the scripted one, stopped for good after its first proposal (a run that is
still going when the worker dies); otherwise it is the real loop.
"""

from __future__ import annotations

import os
import sys
import threading


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernelopt_site.settings")
    import django

    django.setup()

    import dramatiq

    from tests.worker.conftest import bound_actors, make_broker

    if os.environ.get("KERNELOPT_TEST_SCRIPTED_LOOP") == "block":
        from runner import pipeline
        from tests.worker.fakes import ScriptedLoop

        pipeline.run_loop = ScriptedLoop(gate=threading.Event())
        pipeline.make_executor = lambda run: "executor"

    broker = make_broker()
    with bound_actors(broker, sys.argv[1]) as queues:
        worker = dramatiq.Worker(broker, queues=set(queues.values()), worker_threads=1)
        worker.start()
        print("worker ready", flush=True)
        threading.Event().wait()  # until killed


if __name__ == "__main__":
    main()
