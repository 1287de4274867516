"""What the launcher and its workers share: the rendezvous store (client and server) and the job
secret, host and address probes, and each worker's compute-thread budget.  It imports nothing
else of fuse's, so both sides can depend on it."""
