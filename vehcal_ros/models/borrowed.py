"""Borrowed array views for numba hot loops: no reference counting inside the loop.

numba counts references to every array a function holds. When a kernel is inlined into a loop (``inline=
"always"``, the 8-DOF step in its time loop), each of its array arguments becomes a new reference per
iteration: an atomic increment and decrement of the array's owner (its ``meminfo``) per array per step, and
enough of them to double the 8-DOF step's cost. A *borrowed* view is the same array (data, shape, strides)
with no owner, which is how numba's own parallel gufuncs see their arguments: the counting operations on it
test a NULL pointer that the compiler folds away. It is valid while someone else owns the memory, so a hot
loop borrows only arrays it receives as arguments (the caller holds them for the call) and never returns or
stores a borrowed view.
"""

from __future__ import annotations

from numba.core import types
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array


@intrinsic
def borrowed(typingctx, arr):  # noqa: ARG001 - numba's intrinsic signature
    """The array ``arr`` as a view without an owner (NULL meminfo, no parent object); same type."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, value=args[0])
        out = context.make_array(sig.return_type)(context, builder)
        populate_array(out, data=src.data, shape=src.shape, strides=src.strides, itemsize=src.itemsize,
                       meminfo=None)
        return out._getvalue()

    return arr(arr), codegen
