"""Stream workflows, one module each. A workflow validates its request, then records
itself (its type and every input its steps need, together with the stream's new state)
in the stream's ``workflow`` key in one atomic table update, then runs its steps. Every
step is idempotent, so ``StreamController.start()`` finishes a workflow interrupted by a
crash by running its steps again from the recorded input. A workflow ends with one
atomic update that writes its results, the state it leaves the stream in, and clears
the ``workflow`` key."""
