"""Wake blocked acquirers when a lock is released (Redlock step 9: waiting must not spin).

The release script PUBLISHes the released value on the lock's channel. Each
`Redlock` keeps at most one subscriber connection per master, opened the
first time an acquire has to wait, and shared by every waiter: channels are
reference-counted and every message read from a connection is handed to
its listener as it is parsed (subscribing only writes, so waiters never race
for replies). A missed message costs a waiter at most its fallback poll interval;
it never costs correctness, since every wake-up is followed by a real attempt.

A waiter ignores the messages its own failed attempts cause (their payload is
its own value), so a split vote does not turn into a tight retry loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from lockclient._nodes import Master
from lockclient._quorum import fan_out
from lockclient.transport.codec import pack
from lockclient.transport.connection import Link

__all__ = ["Notifier", "Watch"]

RECONNECT_DELAY = 0.5  # a dead master is retried twice a second; waiters fall back to polling meanwhile


class Watch:
    """One waiter's interest in one channel: an event, and the values to ignore."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.event = asyncio.Event()
        self.own: set[bytes] = set()

    def arm(self, value: str) -> None:
        """Call before each attempt: forget earlier wake-ups, ignore this attempt's own release."""
        self.own.add(value.encode())
        self.event.clear()

    async def wait(self, seconds: float) -> bool:
        """True if a release was announced within `seconds`."""
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await self.event.wait()
        except TimeoutError:
            return False
        return True


class _Listener:
    """The subscriber connection to one master and the task that keeps it open.

    The connection's replies are all pushed to `_handle` as they are parsed;
    waiters only write SUBSCRIBE/UNSUBSCRIBE, so nothing races for the replies.
    """

    def __init__(self, master: Master, notifier: Notifier) -> None:
        self._master = master
        self._notifier = notifier
        self._link: Link | None = None
        self._confirmed: dict[str, asyncio.Event] = {}
        self.down = False  # the last connection attempt failed: do not wait for its confirmations
        self.task = asyncio.create_task(self._run(), name=f"lockclient-notify {master.url}")

    def confirmed(self, channel: str) -> asyncio.Event:
        return self._confirmed.setdefault(channel, asyncio.Event())

    def send(self, command: str, channel: str) -> None:
        link = self._link
        if link is not None:  # otherwise the listener subscribes to every wanted channel when it connects
            link.write(pack(command, channel))

    async def _run(self) -> None:
        while True:
            try:
                link = await self._master.subscriber(self._handle, timeout=self._notifier.connect_timeout)
            except ConnectionError:
                self.down = True  # reconnect below; waiters poll meanwhile
            else:
                self._link = link
                self.down = False
                try:
                    wanted = self._notifier.channels
                    if wanted:
                        link.write(pack("SUBSCRIBE", *wanted))
                    await link.gone.wait()
                finally:
                    self._link = None
                    self._confirmed.clear()
                    link.drop("the notifier stopped")
                self.down = True
            await asyncio.sleep(RECONNECT_DELAY)

    def _handle(self, reply: object) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, channel = bytes(reply[0]), bytes(reply[1]).decode()
        if kind == b"subscribe":
            self.confirmed(channel).set()
        elif kind == b"unsubscribe":
            self._confirmed.pop(channel, None)
        elif kind == b"message":
            self._notifier.dispatch(channel, bytes(reply[2]))

    async def aclose(self) -> None:
        self.task.cancel()
        await asyncio.wait([self.task])  # unlike awaiting it, never swallows the caller's own cancellation


class Notifier:
    """Release notifications from every master, shared by one Redlock's waiters."""

    def __init__(
        self, masters: Sequence[Master], *, connect_timeout: float, subscribe_timeout: float
    ) -> None:
        self._masters = masters
        self.connect_timeout = connect_timeout
        self._subscribe_timeout = subscribe_timeout
        self._listeners: list[_Listener] = []
        self._watches: dict[str, set[Watch]] = {}

    @property
    def channels(self) -> list[str]:
        return list(self._watches)

    async def watch(self, channel: str, *, within: float) -> Watch:
        """Subscribe (once per channel) and wait, briefly and at most `within` seconds (what is left of
        the caller's deadline), until the masters confirm it."""
        if not self._listeners:
            self._listeners = [_Listener(master, self) for master in self._masters]
        watch = Watch(channel)
        first = channel not in self._watches
        self._watches.setdefault(channel, set()).add(watch)
        if first:
            for listener in self._listeners:
                listener.send("SUBSCRIBE", channel)
        # A timeout here only widens the window in which a release can be missed (then we poll).
        # Masters known to be down are not waited for: they subscribe when they come back.
        await fan_out(
            [listener.confirmed(channel).wait() for listener in self._listeners if not listener.down],
            max(0.0, min(self._subscribe_timeout, within)),
        )
        return watch

    async def unwatch(self, watch: Watch) -> None:
        watches = self._watches.get(watch.channel)
        if watches is None:
            return
        watches.discard(watch)
        if not watches:
            del self._watches[watch.channel]
            for listener in self._listeners:
                listener.send("UNSUBSCRIBE", watch.channel)

    def dispatch(self, channel: str, value: bytes) -> None:
        for watch in self._watches.get(channel, ()):
            if value not in watch.own:
                watch.event.set()

    async def aclose(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            await listener.aclose()
