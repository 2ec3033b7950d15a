#ifndef HPDLF_COMMON_CPUS_H
#define HPDLF_COMMON_CPUS_H

/* CPUs online, read once: glibc's sysconf(_SC_NPROCESSORS_ONLN) opens and
 * reads /sys/devices/system/cpu/online on every call, and workspace sizes
 * ask for it per kernel and per plan candidate (60,000 opens in 3 steps of
 * the 3-D U-Net out of core, 3% of its CPU).  At least 1. */
int hp_cpus_online(void);

#endif
