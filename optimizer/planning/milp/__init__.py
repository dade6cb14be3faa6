"""The fleet MILP: problem data (:mod:`.problem`), model building (:mod:`.build`), solving (:mod:`.solve`),
the time-limited child solve (:mod:`.deadline`) and the restricted MILP of large fleets (:mod:`.restrict`).

Import each name from its module (``from optimizer.planning.milp.solve import solve_fleet``): this
package re-exports nothing, so every import says where the code lives.
"""
