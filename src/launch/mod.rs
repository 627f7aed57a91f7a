//! Bootstrap: where a rank learns its place in the job (`env://` as torchrun, Slurm, Open MPI
//! and MPICH set it up, `tcp://host:port`, `file:///path`) and the store it rendezvous through.
