"""Settings for the whole suite.

Several tests interrupt a real ``lnet-send`` or ``lnet-get`` with SIGINT, as Ctrl-C does, and expect exit 130. A
process started in the background by a shell without job control (``cmd &`` in a script, as CI runners and
``nohup`` do) begins with SIGINT ignored, and every process it starts inherits that: Python then installs no
``KeyboardInterrupt`` handler, and Ctrl-C does nothing. The suite gives itself back the default handler, so that
the processes it starts hear SIGINT as they would from a terminal.
"""

from __future__ import annotations

import signal

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
