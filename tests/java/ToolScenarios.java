// What admin tools (kafka-log-dirs.sh, kafka-configs.sh --describe --all,
// kafka-consumer-groups.sh --describe, Kafka UI, Redpanda Console, AKHQ) call through the
// AdminClient, each checked here; prints one line per finding for the pytest side.
// Usage: ToolScenarios BOOTSTRAP TOPIC PARTITIONS GROUP
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;

public final class ToolScenarios {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String group = args[3];
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < partitions; i++) {
            tps.add(new TopicPartition(topic, i));
        }
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            logDirs(admin, tps);
            Map<TopicPartition, PartitionReassignment> moving =
                    admin.listPartitionReassignments().reassignments().get();
            Check.out("reassignments " + moving.size());
            int producers = 0;
            for (var state : admin.describeProducers(tps).all().get().values()) {
                for (ProducerState p : state.activeProducers()) {
                    Check.that(p.producerId() >= 0, "producer id " + p.producerId());
                    producers++;
                }
            }
            Check.out("producers " + producers);
            Map<ClientQuotaEntity, Map<String, Double>> quotas =
                    admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            Check.out("quotas " + quotas.size());
            brokerConfigs(admin);
            groupDescribe(admin, group, tps);
        }
        Check.out("OK tools");
    }

    // kafka-log-dirs.sh --describe: every partition in some directory, sizes added up.
    static void logDirs(Admin admin, List<TopicPartition> tps) throws Exception {
        Map<Integer, Map<String, LogDirDescription>> all =
                admin.describeLogDirs(List.of(0)).allDescriptions().get();
        Map<String, LogDirDescription> dirs = all.get(0);
        Check.that(dirs != null && !dirs.isEmpty(), "no log dirs for broker 0");
        Map<TopicPartition, Long> sizes = new HashMap<>();
        for (var e : dirs.entrySet()) {
            LogDirDescription d = e.getValue();
            Check.that(d.error() == null, "log dir error " + d.error());
            Check.that(d.totalBytes().isPresent() && d.totalBytes().getAsLong() > 0, "total bytes");
            for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                Check.that(r.getValue().size() >= 0, "negative size");
                sizes.merge(r.getKey(), r.getValue().size(), Long::sum);
            }
            Check.out("logdir " + e.getKey());
        }
        for (TopicPartition tp : tps) {
            Check.that(sizes.containsKey(tp), "no size for " + tp);
            Check.out("size " + tp.partition() + " " + sizes.get(tp));
        }
    }

    // kafka-configs.sh --entity-type brokers --entity-name 0 --describe --all
    static void brokerConfigs(Admin admin) throws Exception {
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "0");
        Config config = admin.describeConfigs(List.of(broker),
                new DescribeConfigsOptions().includeSynonyms(true)).all().get().get(broker);
        ConfigEntry ibp = config.get("inter.broker.protocol.version");
        Check.that(ibp != null && ibp.value() != null, "no inter.broker.protocol.version");
        Check.out("ibp " + ibp.value());
        // Removed in Kafka 4.0 (KIP-724): a broker of the 4.x protocol does not list it.
        Check.that(config.get("log.message.format.version") == null, "log.message.format.version listed");
        int withSynonyms = 0;
        for (ConfigEntry e : config.entries()) {
            Check.that(e.source() != ConfigEntry.ConfigSource.UNKNOWN, "unknown source of " + e.name());
            if (!e.synonyms().isEmpty()) {
                withSynonyms++;
            }
        }
        Check.out("broker configs " + config.entries().size() + " with synonyms " + withSynonyms);
    }

    // kafka-consumer-groups.sh --describe: committed offsets against the end offsets.
    static void groupDescribe(Admin admin, String group, List<TopicPartition> tps) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
        for (TopicPartition tp : tps) {
            commit.put(tp, new OffsetAndMetadata(1));
        }
        admin.alterConsumerGroupOffsets(group, commit).all().get();
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (TopicPartition tp : committed.keySet()) {
            latest.put(tp, OffsetSpec.latest());
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
                admin.listOffsets(latest).all().get();
        long lag = 0;
        for (var e : committed.entrySet()) {
            lag += ends.get(e.getKey()).offset() - e.getValue().offset();
        }
        Check.out("group partitions " + committed.size() + " lag " + lag);
    }
}
