import threading
import time

from mlgate_reconciler.workqueue import BASE_DELAY, WorkQueue


def test_a_key_added_twice_while_waiting_is_handed_out_once():
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["a", "b", None]


def test_a_key_added_while_a_worker_holds_it_comes_back_only_after_done():
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(0) == "a"
    queue.add("a")
    assert queue.get(0) is None  # never two workers on one key
    queue.done("a")
    assert queue.get(0) == "a"


def test_a_key_added_after_a_delay_is_not_handed_out_before_it():
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.2)
    assert queue.get(0.05) is None
    assert queue.get(1.0) == "a"


def test_retries_back_off_exponentially_and_forget_resets_the_backoff():
    queue: WorkQueue[str] = WorkQueue()
    assert [queue.retry("a"), queue.retry("a"), queue.retry("a")] == [BASE_DELAY, BASE_DELAY * 2, BASE_DELAY * 4]
    queue.forget("a")
    assert queue.retry("a") == BASE_DELAY


def test_shut_down_wakes_a_waiting_worker():
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    time.sleep(0.05)
    queue.shut_down()
    worker.join(2)
    assert not worker.is_alive() and got == [None]


def test_the_depth_counts_ready_and_delayed_keys():
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add_after("b", 60)
    assert len(queue) == 2
