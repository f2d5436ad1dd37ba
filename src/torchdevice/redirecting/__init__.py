"""The redirect: how a device request is seen, decided, placed and counted.

The policy (``policy``: a pure function from a request to a decision), the two ways in (the
function mode, ``mode``, and the entry-points tier, ``entry_points``) over one table
(``intercepts``) and its handlers (``handlers``), the state of one activation and its one
placement path (``runtime``), what each tensor stands for (``standing``), which frame is the
user's (``callsite``), what compiled code sees (``compiling``) and the CPU rerun of ops the
device lacks (``fallback``).

Named ``redirecting`` as the report's package is ``reporting``: ``torchdevice.redirect`` is
the public function, and a subpackage of that name would replace it as the package's
attribute once imported. Nothing is imported here: ``torchdevice.redirecting.policy``
loads without torch.
"""
