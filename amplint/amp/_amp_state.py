"""``from apex.amp._amp_state import _amp_state, master_params`` with apex -> amplint: this
module is the view itself (see ``_compat.py``), so the package attribute ``amp._amp_state``
stays the view after it is imported."""
import sys

from ._compat import _amp_state

sys.modules[__name__] = _amp_state
