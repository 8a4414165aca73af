"""Vertex-cut partitioning: ``assignment.zarr`` (which edge goes where, which replica is the root)
and one ``part_<k>.zarr`` per partition, the stores the trainer reads (docs/design.md#stores).

Stages (each a CLI command, each a Snakemake rule): :func:`~distgnn.partition.assign.assign_graph`
writes ``<DIR>/assignment.zarr``; :func:`~distgnn.partition.part_writer.build_part` writes
``<DIR>/part_<k>.zarr`` for one k (parts are independent jobs).

``assignment.zarr``
    ``edge_part`` uint8 [E] (uint16 when P > 255): partition of edge e, where e indexes the graph
    store's ``indices`` (store order, the order the stream methods see); ``replicas`` uint64
    [N, ceil(P/64)]: bit p set when vertex v has a replica on p; ``root`` int32 [N]: the partition
    holding v's root. Attrs: P, method, seed, order, root_rule (``balance`` or ``in-edges``, see
    :func:`~distgnn.partition.assign.compute_assignment`), graph (path), store, graph_checksum,
    num_nodes, num_edges, quality figures (see :mod:`distgnn.partition.quality`) and per-part
    counts, lists of P: ``part_edges``, ``part_vertices``, ``part_roots``, ``part_train_roots``,
    ``part_split`` (each part's m_k, n_k, num_roots, training roots, num_split: enough to estimate
    a rank's memory before any part is built; assignments made before ``part_split`` have it
    counted from ``replicas``).

``part_<k>.zarr`` (ids local unless named global)
    Local numbering (attr ``layout_version`` 2): the part's roots first (local ids ``[0, n_roots)``,
    attr ``n_roots``), then its leaves, each block in ascending global id, so a rank's dense work
    under apply-at-root runs on a prefix of its rows. Parts without the attribute (numbered by
    global id alone) are refused in one line by every reader (:func:`layout.check_layout`).
    ``local_to_global`` int64 [n_k]; ``indptr`` int64 [n_k+1] / ``indices`` int32 [m_k]: local CSR
    by destination (row i lists the local sources of the in-edges of i that live on k, in
    ascending global id);
    ``t_indptr`` / ``t_indices``: its transpose (CSR by source); ``in_degree_global`` int64 [n_k]:
    in-degree in the whole graph; ``is_root`` bool [n_k]; ``feat`` float32 [n_k, F]; ``label``;
    ``train_mask`` / ``val_mask`` / ``test_mask`` bool [n_k], true only at roots (each vertex counted
    once over all parts).

    Communication plan. ``comm/leaf_send`` int64 with ``comm/leaf_send_offsets`` int64 [P+1]: for
    partition k, entries ``[off[j]:off[j+1]]`` are the LOCAL ids (in part k) of k's leaf replicas
    whose root is on partition j, sorted by global id (the group j = k is empty).
    ``comm/root_recv`` int64 with ``comm/root_recv_offsets`` int64 [P+1]: for partition j, entries
    ``[off[k]:off[k+1]]`` are the LOCAL ids (in part j) of j's roots that have a leaf on partition
    k, sorted by global id. So element i of k's send group towards j and element i of j's receive
    group from k are the same vertex: sender and receiver agree without exchanging ids.

    Attrs: k, P, method, seed, store, graph, graph_checksum, num_nodes, num_edges (global), n_k,
    m_k, layout_version, n_roots, num_split (local vertices with replicas elsewhere), num_roots, num_leaves, train/val/test
    root counts, feat_dim, num_classes, multilabel.
"""
