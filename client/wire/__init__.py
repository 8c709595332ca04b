"""The wire: the one depot client (``DepotClient``, over httpx) and the range connection to HTTP replicas
(``RangeConnection``, over h11 and trio); both apply ``lnet.protocol.h11_receive``'s patches to the HTTP libraries
when they start.

It speaks protocols and nothing else: it must not import the engines, the formats, sending, fetching or the
commands, nor anything of the depot (only ``lnet.protocol``).
"""
