"""distbench: one training task, several data-parallel backends, compared fairly."""

import os
import sys

__version__ = "0.1.0"


def leave(code: int | None = 0):
    """Flush and leave without interpreter finalization, once a process's work is written.

    torch 2.14 + gloo: once torch._dynamo is imported (every optimizer and DDP's constructor do it),
    destroy_process_group no longer joins gloo's worker threads. A worker still releasing the last collective's
    work then drops the last C++ reference to a Python tensor while the interpreter finalizes: taking the GIL ends
    the thread inside a noexcept destructor, std::terminate, SIGABRT ("terminate called without an active
    exception"; core dump: ProcessGroupGloo::runLoop -> ~AsyncBarrierWork -> ~AsyncAllreduceWork ->
    TensorImpl::decref_pyobject -> take_gil -> pthread_exit), after the work is done (pytorch/pytorch#179291, the
    same mechanism). Seen here in about 1 run in 10 of a user task with Adam under torchrun x2, and under
    accelerate launch in the contract script and the hand-written Accelerate loop.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0)
