// AdminClient calls against tidegate, one scenario per run; each checks its own results
// and prints "OK <scenario>" (or fails the process).
// Usage: AdminScenarios BOOTSTRAP SCENARIO ARGS...
//   topics TOPIC PARTITIONS          createTopics, describeTopics, describeCluster
//   replicas TOPIC                   describeTopics: "partition P leader=L replicas=A,B isr=A,B"
//   configs TOPIC                    describeConfigs (topic and broker)
//   offsets TOPIC COUNT TS_BASE      listOffsets earliest/latest/forTimestamp x isolation
//   delete-records TOPIC BEFORE      deleteRecords on partition 0, earliest moves
//   groups GROUP TOPIC PARTITIONS    listConsumerGroups, describeConsumerGroups,
//                                    listConsumerGroupOffsets (after a commit)
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

public final class AdminScenarios {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String scenario = args[1];
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            switch (scenario) {
                case "topics":
                    topics(admin, args[2], Integer.parseInt(args[3]));
                    break;
                case "configs":
                    configs(admin, args[2]);
                    break;
                case "replicas":
                    replicas(admin, args[2]);
                    break;
                case "offsets":
                    offsets(admin, args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]));
                    break;
                case "delete-records":
                    deleteRecords(admin, args[2], Long.parseLong(args[3]));
                    break;
                case "groups":
                    groups(admin, args[2], args[3], Integer.parseInt(args[4]));
                    break;
                default:
                    throw new IllegalArgumentException(scenario);
            }
        }
        Check.out("OK " + scenario);
    }

    static void topics(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        Check.that(d.partitions().size() == partitions, "partitions " + d.partitions().size());
        for (int i = 0; i < partitions; i++) {
            Check.that(d.partitions().get(i).partition() == i, "partition order");
            Check.that(d.partitions().get(i).leader() != null, "no leader for " + i);
        }
        DescribeClusterResult cluster = admin.describeCluster();
        Collection<Node> nodes = cluster.nodes().get();
        Check.that(nodes.size() >= 1, "no nodes");
        Check.that(cluster.clusterId().get() != null, "no cluster id");
        Check.out("cluster " + cluster.clusterId().get() + " nodes=" + nodes.size()
                + " controller=" + cluster.controller().get());
    }

    static String ids(List<Node> nodes) {
        StringBuilder b = new StringBuilder();
        for (Node n : nodes) {
            b.append(b.length() == 0 ? "" : ",").append(n.id());
        }
        return b.toString();
    }

    static void replicas(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        for (TopicPartitionInfo p : d.partitions()) {
            Check.out("partition " + p.partition() + " leader=" + (p.leader() == null ? -1 : p.leader().id())
                    + " replicas=" + ids(p.replicas()) + " isr=" + ids(p.isr()));
        }
    }

    static void configs(Admin admin, String topic) throws Exception {
        ConfigResource t = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Map<ConfigResource, Config> all = admin.describeConfigs(List.of(t)).all().get();
        Config c = all.get(t);
        Check.that(c != null, "no topic config");
        Check.that(c.get("retention.ms") != null, "no retention.ms in " + c);
        Check.out("topic configs " + c.entries().size() + " retention.ms=" + c.get("retention.ms").value());
    }

    static Map<TopicPartition, Long> list(Admin admin, Map<TopicPartition, OffsetSpec> specs,
                                          IsolationLevel level) throws Exception {
        ListOffsetsResult r = admin.listOffsets(specs, new ListOffsetsOptions(level));
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : r.all().get().entrySet()) {
            out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    static void offsets(Admin admin, String topic, int count, long tsBase) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        for (IsolationLevel level : IsolationLevel.values()) {
            long earliest = list(admin, Map.of(tp, OffsetSpec.earliest()), level).get(tp);
            long latest = list(admin, Map.of(tp, OffsetSpec.latest()), level).get(tp);
            long at = list(admin, Map.of(tp, OffsetSpec.forTimestamp(tsBase + 3)), level).get(tp);
            long after = list(admin, Map.of(tp, OffsetSpec.forTimestamp(tsBase + count + 100)), level).get(tp);
            Check.that(earliest == 0, level + " earliest " + earliest);
            Check.that(latest == count, level + " latest " + latest);
            Check.that(at == 3, level + " forTimestamp " + at);
            Check.that(after == -1, level + " forTimestamp past the end " + after);
            Check.out(level + " earliest=" + earliest + " latest=" + latest + " ts=" + at);
        }
    }

    static void deleteRecords(Admin admin, String topic, long before) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(before)))
                .lowWatermarks().get(tp).get().lowWatermark();
        Check.that(low == before, "low watermark " + low);
        long earliest = list(admin, Map.of(tp, OffsetSpec.earliest()), IsolationLevel.READ_UNCOMMITTED).get(tp);
        Check.that(earliest == before, "earliest after deleteRecords " + earliest);
    }

    @SuppressWarnings("deprecation")
    static void groups(Admin admin, String group, String topic, int partitions) throws Exception {
        Collection<ConsumerGroupListing> listed = admin.listConsumerGroups().all().get();
        boolean found = false;
        for (ConsumerGroupListing l : listed) {
            found |= l.groupId().equals(group);
        }
        Check.that(found, group + " not in " + listed);
        // The 4.x listGroups: ListGroups v5 with state and type filters.
        Collection<GroupListing> stable = admin.listGroups(ListGroupsOptions.forConsumerGroups()
                .inGroupStates(Set.of(GroupState.STABLE, GroupState.EMPTY))).all().get();
        GroupListing mine = null;
        for (GroupListing l : stable) {
            if (l.groupId().equals(group)) {
                mine = l;
            }
        }
        Check.that(mine != null, group + " not in listGroups " + stable);
        Check.that(mine.type().orElse(null) == GroupType.CLASSIC, "type " + mine.type());
        Check.out("listGroups " + mine.groupId() + " " + mine.type().get() + " " + mine.groupState().get()
                + " protocol=" + mine.protocol());
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get();
        Check.out("describe " + d.groupId() + " state=" + d.groupState() + " members=" + d.members().size()
                + " assignor=" + d.partitionAssignor());
        Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        Check.that(offsets.size() == partitions, "committed partitions " + offsets.keySet());
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            Check.that(e.getKey().topic().equals(topic), "topic " + e.getKey());
            Check.out("committed " + e.getKey().partition() + " " + e.getValue().offset()
                    + " metadata=" + e.getValue().metadata());
        }
        long total = 0;
        for (OffsetAndMetadata o : offsets.values()) {
            total += o.offset();
        }
        Check.out("committed total " + total);
        if (d.members().isEmpty()) {
            // An empty group accepts admin commits (generation -1); metadata round-trips.
            Map<TopicPartition, OffsetAndMetadata> reset = new HashMap<>();
            for (TopicPartition tp : offsets.keySet()) {
                reset.put(tp, new OffsetAndMetadata(1, "meta-" + tp.partition()));
            }
            admin.alterConsumerGroupOffsets(group, reset).all().get();
            Map<TopicPartition, OffsetAndMetadata> back =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Check.that(back.equals(reset), "after alter: " + back);
            admin.deleteConsumerGroups(List.of(group)).all().get();
            Check.that(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().isEmpty(),
                    "offsets left after deleteConsumerGroups");
            Check.out("altered, read back and deleted " + group);
        }
    }
}
