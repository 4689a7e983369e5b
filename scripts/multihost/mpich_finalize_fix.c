/*
 * Preload shim for MPICH 4.0.x (ch4:ucx) over UCX's TCP transport: keeps MPI_Finalize from
 * hanging across hosts. scripts/multihost.sh compiles it and preloads it into the ranks
 * (docs/cluster.md, "MPI_Finalize hang with MPICH < 4.2 over UCX").
 *
 * The hang: MPICH 4.0.2's MPIDI_UCX_mpi_finalize_hook calls ucp_disconnect_nb() (a close in
 * flush mode) on every endpoint, spins in ucp_worker_progress() until its own close requests
 * complete, then enters a blocking PMI barrier in which it no longer progresses UCX. A flush
 * over TCP can need the peer's progress; a rank whose closes finished first sits in the PMI
 * barrier while a slower rank's close towards it never completes: both wait forever (seen
 * with a bare MPI_Init/MPI_Barrier/MPI_Finalize program in 3 of 15 runs across the emulated
 * hosts, with an MPI_Alltoall before the barrier in 13 of 25). MPICH removed that PMI barrier
 * upstream (pmodels/mpich#6596, "ch4/ucx: remove MPIR_pmi_barrier in finalize", July 2023).
 *
 * The fix: the finalize hook is the only caller of ucp_disconnect_nb() in libmpich 4.0.2
 * (one call site). This definition, found before libucp's, leaves the endpoint open and
 * reports the close as done, so no rank waits on a peer before the PMI barrier; after it
 * MPICH calls ucp_worker_destroy(), which destroys the endpoints that are still open without
 * a flush. Nothing user-visible is lost: by then every rank is inside MPI_Finalize, so every
 * MPI operation has completed (MPI requires it) and the PMI barrier orders all ranks' exits
 * after it.
 *
 * No dependency on UCX (the signature is spelled out with opaque pointers), so preloading it
 * into a non-MPI process (a wrapper script's shell) is harmless.
 */
typedef struct ucp_ep* ucp_ep_h;
typedef void* ucs_status_ptr_t;

__attribute__((visibility("default"))) ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep);

ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep) {
  (void)ep;
  return (ucs_status_ptr_t)0; /* UCS_OK: completed in place */
}
